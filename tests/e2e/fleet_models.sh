#!/usr/bin/env bash
# e2e (#28): models known from the fleet. An --role api agentqd loads alpha only
# (--model-ttl-h 0.01: 36 s). Worker wb serves beta (a copy of the tiny model, --chat-family
# chatml): the API learns beta from wb's advert and validates it with the header wb publishes
# (GET /v1/models: source fleet, chat family chatml; a prompt past the context is refused with
# the same message as for the local alpha with the same file and family), and beta jobs run.
# wb stops: beta stays known (served false); the API restarts and still knows it (its cache);
# a beta job is accepted, waits queued with a "waiting" event. Past the TTL beta is a 400 again,
# as gamma (never served) always is. wb comes back: the waiting job runs.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd
need_model
need_tools redis-server redis-cli python3 curl

start_redis
mkdir -p "$tmp/models" "$tmp/wbmodels"
cp "$model" "$tmp/models/alpha.gguf"
cp "$model" "$tmp/wbmodels/beta.gguf"  # NOTE: only the worker has this file

admin="aq_fleet_models_admin_0123456789ab"
common=(--redis "redis://127.0.0.1:$rport" --admin-key "$admin" --rate-limit 0 --heartbeat-ms 200)
start_api() {
  rm -f "$tmp/api_port"
  "$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/api_port" --data-dir "$tmp/api" "${common[@]}" \
    --model "$tmp/models/alpha.gguf" --chat-family chatml --model-ttl-h 0.01 >>"$tmp/api.log" 2>&1 &
  api_pid=$!
  pids+=($api_pid)
  wait_file "$tmp/api_port"
  base="http://127.0.0.1:$(cat "$tmp/api_port")"
}
start_wb() {
  "$bin/agentqd" --role worker --worker-id wb --data-dir "$tmp/api" "${common[@]}" \
    --model "$tmp/wbmodels/beta.gguf" --chat-family chatml >>"$tmp/wb.log" 2>&1 &
  wb_pid=$!
  pids+=($wb_pid)
}
start_api
get() { curl -sf -H "Authorization: Bearer $admin" "$base$1"; }
post() {  # post MODEL [TEXT] -> "STATUS BODY"
  local text=${2:-Once upon a time}
  curl -s -o "$tmp/out" -w '%{http_code}' -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
    "$base/v1/jobs" -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"$text\"}],\"max_turns\":1,\"max_tokens_per_turn\":8}"
  echo " $(cat "$tmp/out")"
}
job_id() { python3 -c 'import json,sys; print(json.loads(sys.argv[1].split(" ",1)[1])["id"])' "$1"; }
status() { get "/v1/jobs/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])'; }
wait_terminal() {
  for _ in $(seq 1 300); do
    case "$(status "$1")" in completed | incomplete) return 0 ;; failed | cancelled) fail "$1 $(status "$1")" ;; esac
    sleep 0.1
  done
  fail "$1 not terminal: $(status "$1")"
}
model() {  # model NAME -> its GET /v1/models entry as JSON, or "null"
  get /v1/models | python3 -c "import json,sys; print(json.dumps({m['id']: m for m in json.load(sys.stdin)['data']}.get('$1')))"
}
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(json.dumps(d and d.get('$2')))" "$(model "$1")"; }

# Before any worker: beta and gamma are unknown.
r=$(post beta); [ "${r%% *}" = 400 ] || fail "beta before any worker: $r"
[ "$(model beta)" = null ] || fail "beta listed before any worker"

# wb serves beta: known from its advert, validated with its header.
start_wb
for _ in $(seq 1 100); do [ "$(field beta served)" = true ] && break; sleep 0.1; done
[ "$(field beta served)" = true ] || fail "beta not known from wb's advert: $(model beta)"
[ "$(field beta source)" = '"fleet"' ] || fail "beta source: $(model beta)"
[ "$(field beta chat_family)" = '"chatml"' ] || fail "beta chat family (wb's --chat-family): $(model beta)"
[ "$(field alpha source)" = '"local"' ] || fail "alpha source: $(model alpha)"
long=$(python3 -c 'print("Once upon a time there was a dog. " * 300)')
ra=$(post alpha "$long"); rb=$(post beta "$long")
[ "${rb%% *}" = 400 ] || fail "a long beta prompt: $rb"
[ "$(echo "${ra#* }" | sed 's/alpha/M/g')" = "$(echo "${rb#* }" | sed 's/beta/M/g')" ] ||
  fail "fleet and local validation differ: alpha $ra / beta $rb"
echo "long prompt, fleet model: ${rb#* }"
r=$(post beta); [ "${r%% *}" = 202 ] || fail "beta job: $r"
b1=$(job_id "$r")
wait_terminal "$b1"

# wb stops: beta stays known; the API restarts and still knows it (DATA_DIR/fleet-models).
kill "$wb_pid"; wait "$wb_pid" 2>/dev/null || true
t_stop=$(date +%s.%N)
for _ in $(seq 1 50); do [ "$(field beta served)" = false ] && break; sleep 0.1; done
[ "$(field beta served)" = false ] || fail "beta still served after wb stopped"
kill "$api_pid"; wait "$api_pid" 2>/dev/null || true
start_api
[ "$(field beta source)" = '"fleet"' ] || fail "the restarted API forgot beta: $(model beta)"
r=$(post beta); [ "${r%% *}" = 202 ] || fail "beta job while no worker serves it: $r"
b2=$(job_id "$r")
sleep 1.5
[ "$(status "$b2")" = queued ] || fail "b2 is $(status "$b2"), expected queued"
get "/v1/jobs/$b2/events" | python3 -c '
import json, sys
ev = [e for e in json.load(sys.stdin)["data"] if e["type"] == "waiting"]
assert ev, "no waiting event"
d = ev[0]["data"] if isinstance(ev[0]["data"], dict) else json.loads(ev[0]["data"])
assert "beta" in d["reason"], d
print("waiting event:", d["reason"])' || fail "no waiting event on b2"

# Past the TTL (36 s after wb's last advert) beta is unknown again; gamma never was.
for _ in $(seq 1 900); do [ "$(model beta)" = null ] && break; sleep 0.1; done
t_gone=$(date +%s.%N)
[ "$(model beta)" = null ] || fail "beta still listed past its TTL"
r=$(post beta); [ "${r%% *}" = 400 ] || fail "beta past its TTL: $r"
echo "${r#* }" | grep -q "unknown model 'beta'" || fail "beta past its TTL: $r"
r=$(post gamma); [ "${r%% *}" = 400 ] || fail "gamma: $r"
python3 -c "import sys; print(f'beta forgotten {float(sys.argv[2]) - float(sys.argv[1]):.1f} s after wb stopped (TTL 36 s)')" "$t_stop" "$t_gone"

# wb comes back: beta is known again and the waiting job runs.
start_wb
wait_terminal "$b2"
# NOTE: the API relearns beta on its next advert poll (poll_ms 1 s), which may come after wb has
# already claimed and finished b2 (the queue needs no catalog): wait for one poll, not a fixed time.
for _ in $(seq 1 50); do [ "$(field beta served)" = true ] && break; sleep 0.1; done
[ "$(field beta served)" = true ] || fail "beta not served again: $(model beta)"
echo "fleet models: beta known from wb (validated with its header), kept across an API restart, waited, expired, ran"
