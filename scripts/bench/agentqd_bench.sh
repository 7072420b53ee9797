# Sourced by the queue benchmarks that drive one all-in-one agentqd (embedded redis-server, temp data
# dir, WAL + synchronous=FULL as always): queue_cpu_ab.sh, batch_cpu_ab.sh, batch_interactive_ab.sh,
# submit_p99_ab.sh, queue_profile.sh, retention.sh. Gives them one temp dir with cleanup, one way to
# start agentqd and make a key, the process's CPU ticks, and the paired A/B rounds. Not a script of
# its own.
#   bench_init NAME          tmp=$(mktemp ...), pid="", an EXIT trap that stops agentqd and removes tmp
#   bench_start BIN DIR [ARGS...]   agentqd on 127.0.0.1:0 with data dir DIR; sets pid and url, waits
#                            for /readyz; exits 1 with its log tail when it does not come up
#   bench_key TENANT         prints a new API key of TENANT (the admin key bench_start used)
#   bench_stop               stops agentqd
#   bench_cpu                agentqd's user + system ticks so far (divide by $tck for seconds)
#   bench_ab_rounds ROUNDS   the paired A/B scripts' rounds: the caller's run_one BIN LABEL ARGS for A
#                            ($bin_a, $ARGS_A) then B ($bin_b, $ARGS_B), ROUNDS times; each line goes
#                            to stderr as "round R: LINE" and to $tmp/results (emptied first)
bench_init() {
  tmp=$(mktemp -d -t "agentq-$1-XXXXXX")
  pid=""
  tck=$(getconf CLK_TCK)
  admin_key="aq_bench_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  trap 'bench_stop; rm -rf "$tmp"' EXIT
}

bench_start() {
  local bin=$1 dir=$2
  shift 2
  rm -f "$dir.port"
  "$bin/agentqd" --data-dir "$dir" --listen 127.0.0.1:0 --port-file "$dir.port" --model "$model" \
    --admin-key "$admin_key" --rate-limit 0 --log-level warn "$@" >>"$dir.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do [ -s "$dir.port" ] && break; sleep 0.1; done
  [ -s "$dir.port" ] || { echo "$0: agentqd did not start" >&2; tail -20 "$dir.log" >&2; exit 1; }
  url="http://127.0.0.1:$(cat "$dir.port")"
  for _ in $(seq 1 100); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}

bench_key() {
  curl -fsS -X POST -H "Authorization: Bearer $admin_key" -H 'content-type: application/json' \
    -d "{\"tenant\":\"$1\"}" "$url/v1/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}

bench_stop() {
  [ -n "${pid:-}" ] || return 0
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

bench_cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

bench_ab_rounds() {
  : >"$tmp/results"
  local r side line
  for r in $(seq 1 "$1"); do
    for side in A B; do
      if [ $side = A ]; then line=$(run_one "$bin_a" A "${ARGS_A:-}"); else line=$(run_one "$bin_b" B "${ARGS_B:-}"); fi
      echo "round $r: $line" | tee -a "$tmp/results" >&2
    done
  done
}
