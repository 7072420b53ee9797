#!/usr/bin/env bash
# e2e (#28): remote workers open no database. A control plane (--role api --worker-token) owns the
# SQLite file; workers (--role worker --remote URL --control-plane-token T) have their own data dirs
# and reach it only through POST /v1/worker/messages and Redis. Checks: a plain job, a server-side
# tool job (signed with the submitting key's secret, handed over with the claim) and a client-tool
# job (requires_action, then tool outputs) complete on remote workers; no worker data dir holds a
# database file; the worker endpoint refuses a missing or wrong token and a tenant API key; a
# stale-epoch write is fenced; a worker killed with -9 inside a tool call loses the job to another,
# which finishes it with one effect per call id; a worker speaking protocol 2 (the previous) works
# with a control plane speaking 3, one speaking 5 is refused and claims nothing (the reason in its
# advert); a worker token reading a job it does not lease gets its state alone (the read fence).
# Per-worker tokens (--worker-tokens-file beside --worker-token): w6 runs a job with its own token;
# w7 presenting w6's token is refused (403) and claims nothing; emptying the file revokes w6 (401,
# re-read by mtime); SIGHUP re-reads it and the control plane lives on; the fleet token still works.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd
need_model
need_tools redis-server redis-cli python3 curl

start_redis --appendfsync always

# Tool server: /fast answers at once, /slow after 8 s. Each request is a line in calls.txt
# (call_id, signature check); the "effect" (effects.txt) happens once per call id, as a receiver
# deduplicating by the stable call id does. The key's secret to verify with is in $tmp/secret.
cat >"$tmp/tools.py" <<'PY'
import base64, hashlib, hmac, http.server, json, os, sys, threading, time
calls, effects, secret_file, port_file = sys.argv[1:5]
lock = threading.Lock()
def verified(h, body):
    try:
        secret = open(secret_file).read().strip()
    except OSError:
        return "nosecret"
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg = f"{h.get('webhook-id')}.{h.get('webhook-timestamp')}.".encode() + body
    want = base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode()
    return "signed" if any(s.split(",", 1)[-1] == want for s in (h.get("webhook-signature") or "").split()) else "unsigned"
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        call_id = json.loads(body)["call_id"]
        with lock:
            with open(calls, "a") as f: f.write(f"{call_id} {self.path} {verified(self.headers, body)}\n")
        if self.path == "/slow": time.sleep(8)
        with lock:
            seen = open(effects).read().split()
            if call_id not in seen:
                with open(effects, "a") as f: f.write(call_id + "\n")
        out = json.dumps({"output": "sunny"}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(port_file + ".tmp", "w").write(str(srv.server_port)); os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
PY
touch "$tmp/calls.txt" "$tmp/effects.txt"
python3 "$tmp/tools.py" "$tmp/calls.txt" "$tmp/effects.txt" "$tmp/secret" "$tmp/tool_port" >"$tmp/tools.log" 2>&1 &
pids+=($!)
wait_file "$tmp/tool_port"
tools="http://127.0.0.1:$(cat "$tmp/tool_port")"

admin="aq_remote_worker_admin_0123456789ab"
wtoken="wt_remote_worker_token_0123456789"
redis_url="redis://127.0.0.1:$rport"
w6token="wt_w6_own_token_0123456789abcdef"
echo "w6 $w6token  # per-worker token (section 8)" >"$tmp/worker-tokens"
"$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/api_port" --data-dir "$tmp/cp" --redis "$redis_url" \
  --model "$model" --admin-key "$admin" --rate-limit 0 --heartbeat-ms 200 --worker-token "$wtoken" --allow-addresses 127.0.0.0/8 \
  --worker-tokens-file "$tmp/worker-tokens" >"$tmp/cp.log" 2>&1 &
cp_pid=$!
pids+=($cp_pid)
wait_file "$tmp/api_port"
base="http://127.0.0.1:$(cat "$tmp/api_port")"
declare -A wpid
start_worker() {  # start_worker ID [extra flags]   (env tok: the token it presents, default the fleet's)
  local id=$1
  shift
  "$bin/agentqd" --role worker --remote "$base" --control-plane-token "${tok:-$wtoken}" --data-dir "$tmp/$id" --worker-id "$id" \
    --redis "$redis_url" --model "$model" --allow-addresses 127.0.0.0/8 --lease-ms 3000 --heartbeat-ms 200 \
    --reclaim-idle-ms 1500 --reclaim-interval-ms 300 "$@" >"$tmp/$id.log" 2>&1 &
  wpid[$id]=$!
  pids+=($!)
}
start_worker w1

# A tenant key (its webhook secret signs the job's tool requests)
made=$(curl -sf -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' "$base/v1/keys" -d '{"tenant":"t1"}')
key=$(echo "$made" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
echo "$made" | python3 -c 'import json,sys; print(json.load(sys.stdin)["webhook_secret"])' >"$tmp/secret"

api() { curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' "$@"; }
owner() { python3 - "$tmp/cp/agentq.db" "$1" <<'PY'
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT lease_owner FROM jobs WHERE id=?", (sys.argv[2],)).fetchone()[0])
PY
}
submit() { api "$base/v1/jobs" -d "$1" | field '["id"]'; }
tool_job() {  # tool_job PATH -> a job with one server-side tool at $tools/PATH
  submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
    "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function","function":{"name":"look",
    "parameters":{"type":"object","properties":{"q":{"enum":["Paris","London"]}},"required":["q"]}},
    "execution":{"type":"http","url":"'"$tools/$1"'","timeout_ms":10000}}]}'
}

# 1. a plain job on the remote worker
j1=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":16}')
wait_status "$j1" completed incomplete
[ "$(owner "$j1")" = w1 ] || fail "$j1 ran on $(owner "$j1")"
api "$base/v1/jobs/$j1/timeline" >/dev/null || fail "no timeline for $j1"

# 2. a server-side tool: the request is signed with the tenant key's secret (handed over with the claim)
j2=$(tool_job fast)
wait_status "$j2" completed incomplete
grep -q "${j2#job_}" "$tmp/calls.txt" || fail "no tool call of $j2 reached the tool server: $(api "$base/v1/jobs/$j2")"
grep "${j2#job_}" "$tmp/calls.txt" | grep -qv " signed$" && fail "a tool request of $j2 was not signed with the key's secret: $(cat "$tmp/calls.txt")"
n_tool_rows=$(api "$base/v1/jobs/$j2" | python3 -c 'import json,sys; print(sum(1 for m in json.load(sys.stdin)["transcript"] if m["role"]=="tool"))')
[ "$n_tool_rows" -ge 1 ] || fail "$j2 has no tool result in its transcript"
echo "server-side tool: $j2 $(status "$j2") on $(owner "$j2"), request signed"

# 3. a client tool: requires_action, outputs submitted, then done
j3=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
  "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function","function":{"name":"look",
  "parameters":{"type":"object","properties":{"q":{"enum":["Paris","London"]}},"required":["q"]}}}]}')
wait_status "$j3" requires_action
call=$(api "$base/v1/jobs/$j3" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["required_action"]["tool_calls"][0]["id"])')
api "$base/v1/jobs/$j3/tool_outputs" -d "{\"tool_outputs\":[{\"tool_call_id\":\"$call\",\"output\":\"sunny\"}]}" >/dev/null ||
  fail "tool outputs for $j3 refused"
wait_status "$j3" completed incomplete
echo "client tool: $j3 requires_action -> $(status "$j3")"

# 4. the worker's data dir holds no database
dbs=$(find "$tmp/w1" \( -name '*.db' -o -name '*.db-*' -o -name '*.sqlite*' \) | wc -l)
[ "$dbs" = 0 ] || fail "the remote worker's data dir holds a database: $(find "$tmp/w1")"
echo "worker data dir: $(cd "$tmp/w1" && ls -A | tr '\n' ' ')(no database file)"

# 5. the worker endpoint: worker token only; stale epochs fenced; protocol versions checked
wm() {  # wm TOKEN JSON -> HTTP status and body
  curl -s -o "$tmp/wm.out" -w '%{http_code}' -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    "$base/v1/worker/messages" -d "$2"
}
msg() {  # msg V KIND JOB EPOCH BODY
  echo "{\"messages\":[{\"v\":$1,\"msg_id\":\"test:1:$RANDOM$RANDOM\",\"worker_id\":\"test\",\"incarnation\":\"1\",\"job_id\":\"$3\",\"epoch\":$4,\"kind\":\"$2\",\"body\":$5}]}"
}
ev=$(msg 2 event "$j1" 0 '{"type":"note","data":"{}"}')
[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$base/v1/worker/messages" -d "$ev")" = 401 ] ||
  fail "no token: not 401"
[ "$(wm wrong-token "$ev")" = 401 ] || fail "wrong token: not 401"
[ "$(wm "$admin" "$ev")" = 401 ] || fail "the admin API key was taken as a worker credential"
[ "$(wm "$key" "$ev")" = 401 ] || fail "a tenant API key was taken as a worker credential"
[ "$(wm "$wtoken" "$(msg 2 commit_turn "$j2" 0 '{"turn_idx":9,"content":"late"}')")" = 200 ] || fail "worker token refused"
[ "$(field '["replies"][0]["status"]' <"$tmp/wm.out")" = fenced ] || fail "stale epoch not fenced: $(cat "$tmp/wm.out")"
[ "$(wm "$wtoken" "$(msg 9 job "$j2" 0 '{}')")" = 200 ] && [ "$(field '["replies"][0]["status"]' <"$tmp/wm.out")" = invalid ] ||
  fail "protocol 9 not invalid: $(cat "$tmp/wm.out")"
# the read fence: a job this "worker" does not lease: its state alone, no transcript
[ "$(wm "$wtoken" "$(msg 3 job "$j2" 0 '{}')")" = 200 ] || fail "job read: $(cat "$tmp/wm.out")"
python3 -c 'import json,sys; r=json.load(sys.stdin)["replies"][0]["result"]; assert r["state_only"] and r["job"]["request_json"] == "" and r["job"]["status"] in ("completed","incomplete"), r' <"$tmp/wm.out" ||
  fail "a job read without its lease returned content: $(cat "$tmp/wm.out")"
[ "$(wm "$wtoken" "$(msg 3 transcript "$j2" 0 '{}')")" = 200 ] && [ "$(field '["replies"][0]["status"]' <"$tmp/wm.out")" = fenced ] ||
  fail "a transcript read without the lease not fenced: $(cat "$tmp/wm.out")"
echo "worker endpoint: no/wrong token, admin key, tenant key -> 401; stale epoch -> fenced; v 9 -> invalid; reads without the lease: state only / fenced"

# 6. kill -9 a worker inside a slow tool call: another worker finishes the job, one effect per call id
start_worker w2
sleep 1
j4=$(tool_job slow)
for _ in $(seq 1 200); do grep -q "${j4#job_}" "$tmp/calls.txt" && break; sleep 0.05; done
grep -q "${j4#job_}" "$tmp/calls.txt" || fail "$j4: no tool call"
victim=$(owner "$j4")
kill -9 "${wpid[$victim]}"
killed_at=$(date +%s.%N)
wait_status "$j4" completed incomplete
recovered=$(python3 -c "import time; print(f'{time.time() - $killed_at:.1f}')")
survivor=$(owner "$j4")
[ "$survivor" != "$victim" ] || fail "$j4 finished on the killed worker $victim"
n_calls=$(grep -c "${j4#job_}" "$tmp/calls.txt")
n_effects=$(grep -c "${j4#job_}" "$tmp/effects.txt")
n_ids=$(grep "${j4#job_}" "$tmp/calls.txt" | cut -d' ' -f1 | sort -u | wc -l)
[ "$n_effects" = "$n_ids" ] || fail "$j4: $n_effects effects for $n_ids call ids"
n_tool_rows=$(api "$base/v1/jobs/$j4" | python3 -c 'import json,sys; d=[m for m in json.load(sys.stdin)["transcript"] if m["role"]=="tool"]; ids=[m.get("tool_call_id") for m in d]; assert len(ids)==len(set(ids)), ids; print(len(d))')
echo "kill -9: $j4 moved $victim -> $survivor, done ${recovered}s after the kill; $n_calls request(s) for $n_ids call id(s), $n_effects effect(s), $n_tool_rows tool result(s)"

# 7. versions: a worker speaking 5 is refused (claims nothing, says why); one speaking 2 (the previous
# version: its reads carry no lease epoch) works with this control plane at 3 (the default)
kill "${wpid[$survivor]}"
wait "${wpid[$survivor]}" 2>/dev/null || true
start_worker w5 --protocol-version 5
for _ in $(seq 1 100); do
  curl -sf -H "Authorization: Bearer $admin" "$base/v1/workers" | grep -q '"refused":"protocol version 5' && break
  sleep 0.1
done
curl -sf -H "Authorization: Bearer $admin" "$base/v1/workers" | python3 -c '
import json, sys
w = {x["id"]: x for x in json.load(sys.stdin)["data"]}["w5"]
assert w["refused"].startswith("protocol version 5 is not accepted"), w
assert w["free_slots"] == 0 and w["protocol"] == 5, w
print("w5 refused:", w["refused"])' || fail "w5's advert does not say it was refused"
j5=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":16}')
sleep 1.5
[ "$(status "$j5")" = queued ] || fail "$j5 is $(status "$j5") with only a refused worker"
start_worker w3 --protocol-version 2
wait_status "$j5" completed incomplete
[ "$(owner "$j5")" = w3 ] || fail "$j5 ran on $(owner "$j5")"
[ "$(curl -sf -H "Authorization: Bearer $admin" "$base/v1/workers" | python3 -c 'import json,sys; print({x["id"]: x for x in json.load(sys.stdin)["data"]}["w3"]["protocol"])')" = 2 ] ||
  fail "w3 does not advertise protocol 2"
for id in w2 w3 w5; do
  [ -d "$tmp/$id" ] || continue
  [ "$(find "$tmp/$id" \( -name '*.db' -o -name '*.db-*' -o -name '*.sqlite*' \) | wc -l)" = 0 ] || fail "$id has a database file"
done
echo "versions: w5 (protocol 5) refused and idle; $j5 ran on w3 (protocol 2) against a control plane speaking 3"

# 8. per-worker tokens (--worker-tokens-file): w6 runs jobs with its own token; w7 presenting w6's
# token is refused (403: not its id); removing w6's line revokes it (re-read by mtime); SIGHUP re-reads
refused_of() { curl -sf -H "Authorization: Bearer $admin" "$base/v1/workers" |
  python3 -c "import json,sys; print({x['id']: x for x in json.load(sys.stdin)['data']}.get('$1', {}).get('refused', 'absent'))"; }
for id in w3 w5; do kill "${wpid[$id]}" 2>/dev/null || true; wait "${wpid[$id]}" 2>/dev/null || true; done
tok=$w6token start_worker w6
j6=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":16}')
wait_status "$j6" completed incomplete
[ "$(owner "$j6")" = w6 ] || fail "$j6 ran on $(owner "$j6")"
kill "${wpid[w6]}"; wait "${wpid[w6]}" 2>/dev/null || true
tok=$w6token start_worker w7
j7=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":16}')
for _ in $(seq 1 100); do [ "$(refused_of w7)" != "" ] && [ "$(refused_of w7)" != absent ] && break; sleep 0.1; done
refused_of w7 | grep -q "HTTP 403" || fail "w7 with w6's token: $(refused_of w7)"
[ "$(status "$j7")" = queued ] || fail "$j7 is $(status "$j7") with only w7 (w6's token) up"
kill "${wpid[w7]}"; wait "${wpid[w7]}" 2>/dev/null || true
: >"$tmp/worker-tokens"  # revoke w6
sleep 1.2
tok=$w6token start_worker w6
for _ in $(seq 1 100); do refused_of w6 | grep -q "HTTP 401" && break; sleep 0.1; done
refused_of w6 | grep -q "HTTP 401" || fail "w6 after revocation: $(refused_of w6)"
[ "$(status "$j7")" = queued ] || fail "$j7 is $(status "$j7") with only a revoked worker up"
kill -HUP "$cp_pid"
for _ in $(seq 1 50); do grep -q "SIGHUP: worker tokens reloaded" "$tmp/cp.log" && break; sleep 0.1; done
grep -q "SIGHUP: worker tokens reloaded" "$tmp/cp.log" || fail "SIGHUP did not reload the worker tokens"
kill -0 "$cp_pid" || fail "SIGHUP stopped the control plane"
kill "${wpid[w6]}"; wait "${wpid[w6]}" 2>/dev/null || true
start_worker w8  # the fleet-wide token still works beside the file
wait_status "$j7" completed incomplete
echo "per-worker tokens: $j6 ran on w6 (own token); w7 with w6's token refused (403); w6 revoked (401); SIGHUP reloads; $j7 ran on w8 (fleet token)"
echo "ok"
