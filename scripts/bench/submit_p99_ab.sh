#!/usr/bin/env bash
# Paired A/B of submit latency at a fixed rate (issue 29's "submit p99 <= 10 ms at 1,000 submits/s"):
# for each round, binary A then binary B (each a fresh all-in-one agentqd with its embedded redis,
# WAL + synchronous=FULL + AOF everysec as always, the worker running the jobs as they arrive):
# (the order alternates per round: AB, BA, ...) 100 warm-up jobs, then POST /v1/jobs open loop at RATE/s for SECONDS s (queue_node.mjs submit, as
# queue.sh runs it), then the queue drained. Prints one line per run (p50 / p90 / p99 / max ms,
# achieved rate, errors, agentqd CPU-s of the submit phase, 1-min load) and one JSON line of medians.
#   scripts/bench/submit_p99_ab.sh BIN_DIR_A BIN_DIR_B [ROUNDS] [RATE] [SECONDS]   (default 3, 1000, 3)
# ARGS_A / ARGS_B: extra agentqd flags per side. BIN_DIR_B may equal BIN_DIR_A (flag A/B).
# WARMUP_S=W: the client's first W s at the rate are reported apart (queue_node.mjs --warmup-s; its p99
# is the line's tenth figure); the percentiles are then of the SECONDS after (steady state).
# The last figure of a line: the server's own share (%) of the phase's submits (warm-up included) made
# within 10 ms, from agentqd's agentq_http_request_duration_seconds (handler start to the 202 made on
# its io thread): what the client's figures hold apart from its own scheduling on a shared host.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin_a=$1
bin_b=$2
rounds=${3:-3}
rate=${4:-1000}
seconds=${5:-3}
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
source scripts/bench/agentqd_bench.sh
bench_init qp99

run_one() {  # bin_dir label extra_args -> "label p50 p90 p99 max achieved errors cpu_s load warmup_p99"
  local bin=$1 label=$2 d="$tmp/$2.$RANDOM"
  sync
  local -a extra_args
  read -r -a extra_args <<<"$3"
  bench_start "$bin" "$d" "${extra_args[@]}"
  local key
  key=$(bench_key p99)
  python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs 100 --clients 8 --phases throughput >/dev/null
  local load c0 c1 out
  load=$(cut -d' ' -f1 /proc/loadavg)
  curl -fsS "$url/metrics" >"$d.m0" || true
  c0=$(bench_cpu)
  out=$(node scripts/bench/queue_node.mjs submit --url "$url" --key "$key" --model stories260K --rate "$rate" \
    --seconds "$seconds" --warmup-s "${WARMUP_S:-0}" | tail -n 1)
  c1=$(bench_cpu)
  curl -fsS "$url/metrics" >"$d.m1" || true
  python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs 1 --clients 1 --phases throughput >/dev/null
  bench_stop
  python3 - "$label" "$out" "$(python3 -c "print(round(($c1 - $c0) / $tck, 2))")" "$load" "$d.m0" "$d.m1" <<'PY'
import json, re, sys
d = json.loads(sys.argv[2])
def buckets(f):  # agentq_http_request_duration_seconds of POST /v1/jobs: le -> count
    out = {}
    for l in open(f):
        if l.startswith("agentq_http_request_duration_seconds_bucket") and 'route="/v1/jobs"' in l and "POST" in l:
            m = re.search(r'le="([^"]+)"\S* (\S+)$', l.strip())
            if m: out[m.group(1)] = float(m.group(2))
    return out
try:
    a, b = buckets(sys.argv[5]), buckets(sys.argv[6])
    n = b["+Inf"] - a.get("+Inf", 0)
    srv = round(100 * (b["0.01"] - a.get("0.01", 0)) / n, 1) if n else "-"
except (OSError, KeyError):
    srv = "-"
print(sys.argv[1], d["p50_ms"], d["p90_ms"], d["p99_ms"], d["max_ms"], d["achieved_per_s"], d["errors"], sys.argv[3], sys.argv[4],
      d.get("warmup_p99_ms", "-"), srv)
PY
}

lines=()
for r in $(seq 1 "$rounds"); do
  # NOTE: the order alternates (AB, BA, ...): the second run of a pair was measured slower in an A/A
  # of one binary (p99 +10-14 ms in 3 of 3 pairs, session 21), the first run's files still being
  # written back; and each run starts after a sync for the same reason.
  if [ $((r % 2)) -eq 1 ]; then
    a=$(run_one "$bin_a" A "${ARGS_A:-}"); echo "$a" >&2
    b=$(run_one "$bin_b" B "${ARGS_B:-}"); echo "$b" >&2
  else
    b=$(run_one "$bin_b" B "${ARGS_B:-}"); echo "$b" >&2
    a=$(run_one "$bin_a" A "${ARGS_A:-}"); echo "$a" >&2
  fi
  lines+=("$a" "$b")
done
printf '%s\n' "${lines[@]}" | python3 -c '
import json, statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
out = {"rate_per_s": '"$rate"', "seconds": '"$seconds"', "rounds": '"$rounds"'}
for side in ("A", "B"):
    rs = [r for r in rows if r[0] == side]
    for i, k in enumerate(("p50_ms", "p90_ms", "p99_ms", "max_ms", "achieved_per_s", "errors", "cpu_s", "load"), 1):
        out[side + "_" + k] = statistics.median(float(r[i]) for r in rs)
    out[side + "_p99_runs"] = [float(r[3]) for r in rs]
    out[side + "_server_within_10ms_pct_runs"] = [r[10] for r in rs]
print(json.dumps(out))'
