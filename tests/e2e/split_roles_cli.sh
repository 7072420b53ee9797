#!/usr/bin/env bash
# e2e: agentqd split roles (one --role api + one --role worker process sharing a redis-server and a
# data dir) driven only through the agentq CLI: a job runs end to end; `wait` and `events --follow`
# exit with the job's code (0 completed, 10 failed, 11 cancelled, 12 incomplete, 13 requires_action); a webhook
# endpoint answering 410 Gone is disabled (later jobs' deliveries are "disabled", never sent); a 302
# is not followed and counts as a failed attempt. (500-then-recover and SSE resume: api_e2e.cpp.)
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd agentq
need_model
need_tools redis-server redis-cli python3

# redis-server with AOF, shared by both agentqd processes
start_redis --appendfsync always

# webhook receiver: /ok -> 200, /gone -> 410, /redirect -> 302 to /ok; one line per hit in hits.txt
cat >"$tmp/recv.py" <<'PY'
import http.server, sys
hits, port_file = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        code = {"/ok": 200, "/gone": 410, "/redirect": 302}.get(self.path, 404)
        with open(hits, "a") as f:
            f.write(f"{self.path} {self.headers.get('webhook-id')} {code}\n")
        self.send_response(code)
        if code == 302:
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/ok")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(port_file + ".tmp", "w").write(str(srv.server_port))
import os; os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
PY
touch "$tmp/hits.txt"
python3 "$tmp/recv.py" "$tmp/hits.txt" "$tmp/hook_port" >"$tmp/recv.log" 2>&1 &
pids+=($!)
wait_file "$tmp/hook_port"
hook="http://127.0.0.1:$(cat "$tmp/hook_port")"

admin="aq_split_roles_admin_key_0123456789"
common=(--redis "redis://127.0.0.1:$rport" --data-dir "$tmp/data" --model "$model" --allow-addresses 127.0.0.0/8
        --admin-key "$admin" --webhook-schedule 200,200 --rate-limit 0)
"$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/api_port" "${common[@]}" >"$tmp/api.log" 2>&1 &
pids+=($!)
wait_file "$tmp/api_port"
"$bin/agentqd" --role worker "${common[@]}" >"$tmp/worker.log" 2>&1 &
worker_pid=$!
pids+=($worker_pid)

export AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/api_port")" AGENTQ_API_KEY="$admin"
aq() { "$bin/agentq" "$@"; }
status_of() { aq --json status "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])'; }
job_file() {  # job_file NAME WEBHOOK_PATH [extra JSON fields]
  printf '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],
    "max_turns":2,"max_tokens_per_turn":24,"webhook":{"url":"%s%s"}%s}\n' "$hook" "$2" "${3:-}" >"$tmp/$1.json"
}
# exit code of a command without tripping set -e
rc_of() { set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e; echo $rc; }
# poll `agentq webhooks ID` until the first delivery's state is $2
delivery_state() {
  aq --json webhooks "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(d[0]["state"] if d else "none")'
}
wait_delivery() {
  for _ in $(seq 1 100); do [ "$(delivery_state "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "delivery of $1 is $(delivery_state "$1"), wanted $2"
}

# 1. split roles: the api process has no worker; the worker process runs the job; wait's exit code
#    matches the final status (completed 0, incomplete 12)
job_file ok /ok
id=$(aq submit "$tmp/ok.json")
rc=$(rc_of aq wait "$id" --timeout 60)
st=$(status_of "$id")
case "$st:$rc" in completed:0 | incomplete:12) ;; *) fail "job $id: status $st, wait exit $rc" ;; esac
grep -q "worker .* started" "$tmp/worker.log" || fail "worker process did not start a worker"
if grep -q "worker .* started" "$tmp/api.log"; then fail "the api process runs a worker"; fi
wait_delivery "$id" succeeded
grep -q "^/ok " "$tmp/hits.txt" || fail "no webhook at /ok"
echo "split roles: $id $st, wait exit $rc, webhook delivered"

# max_output_tokens 1: incomplete, exit 12
job_file tiny /ok ',"max_output_tokens":1'
id=$(aq submit "$tmp/tiny.json")
rc=$(rc_of aq wait "$id" --timeout 60)
[ "$(status_of "$id")" = incomplete ] && [ "$rc" = 12 ] || fail "max_output_tokens 1: $(status_of "$id"), exit $rc"
[ "$(rc_of aq wait job_doesnotexist)" = 1 ] || fail "wait on an unknown job should exit 1"

# 2. 410 Gone disables the endpoint: the first delivery is "disabled" after one attempt; a later
#    job's delivery to the same URL is recorded "disabled" and never sent
job_file gone /gone
id=$(aq submit "$tmp/gone.json")
aq wait "$id" --timeout 60 >/dev/null 2>&1 || true
wait_delivery "$id" disabled
id2=$(aq submit "$tmp/gone.json")
aq wait "$id2" --timeout 60 >/dev/null 2>&1 || true
wait_delivery "$id2" disabled
sleep 1  # room for a wrong retry to show up
n_gone=$(grep -c "^/gone " "$tmp/hits.txt" || true)
[ "$n_gone" = 1 ] || fail "410 endpoint got $n_gone requests, want 1"
n_att=$(aq --json webhooks "$id2" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"][0]["attempts"]))')
[ "$n_att" = 0 ] || fail "delivery to a disabled endpoint made $n_att attempts"
echo "410: endpoint disabled after 1 request; the next job's delivery disabled with 0 attempts"

# 3. a 302 is not followed: 3 attempts (schedule 200,200), each recorded as 302, then failed
job_file redirect /redirect
id=$(aq submit "$tmp/redirect.json")
aq wait "$id" --timeout 60 >/dev/null 2>&1 || true
wait_delivery "$id" failed
wid=$(aq --json webhooks "$id" | python3 -c 'import json,sys; d=json.load(sys.stdin)["data"][0]
assert [a["status_code"] for a in d["attempts"]] == [302, 302, 302], d
print(d["id"])')
[ "$(grep -c "^/redirect $wid " "$tmp/hits.txt")" = 3 ] || fail "redirect endpoint hits: $(cat "$tmp/hits.txt")"
if grep -q "^/ok $wid " "$tmp/hits.txt"; then fail "the redirect was followed"; fi
echo "302: 3 attempts recorded as 302, Location never fetched, delivery failed"

# 4. events --follow streams a live job and ends with its exit code: a client-tool job stops at
#    requires_action (wait exits 13, follow keeps going); cancel -> follow exits 11
job_file tool /ok ',"tool_choice":"required","tools":[{"type":"function","function":{"name":"lookup",
  "parameters":{"type":"object","properties":{"q":{"type":"string","enum":["alpha","beta"]}},"required":["q"]}}}]'
sed -i 's/"max_tokens_per_turn":24/"max_tokens_per_turn":256/' "$tmp/tool.json"
id=$(aq submit "$tmp/tool.json")
aq events "$id" --follow >"$tmp/follow.out" 2>"$tmp/follow.err" &
follow=$!
rc=$(rc_of aq wait "$id" --timeout 60)
[ "$rc" = 13 ] || fail "client-tool job: wait exit $rc, want 13 (status $(status_of "$id"))"
sleep 0.5
kill -0 "$follow" 2>/dev/null || fail "events --follow ended while the job waits on the client"
grep -q '"requires_action"' "$tmp/follow.out" || fail "follow output lacks requires_action: $(cat "$tmp/follow.out")"
aq cancel "$id" >/dev/null
set +e
wait "$follow"
rc=$?
set -e
[ "$rc" = 11 ] || fail "events --follow exit $rc after cancel, want 11"
grep -q '"cancelled"' "$tmp/follow.out" || fail "follow output lacks the cancellation"
[ "$(rc_of aq wait "$id")" = 11 ] || fail "wait on a cancelled job should exit 11"
n_events=$(aq --json events "$id" | grep -c '"id"' || true)
echo "events --follow: $(wc -l <"$tmp/follow.out") lines streamed live ($n_events in the list), exit 11 on cancel"

# 5. failed -> exit 10: a job that crashes every worker claiming it (fault point after_claim, matched
#    to the job) is failed after --max-deliveries claims; `wait` exits 10
kill "$worker_pid"
wait "$worker_pid" 2>/dev/null || true
start_faulty_worker() {
  AGENTQ_FAULT=after_claim AGENTQ_FAULT_MATCH=poison-pill "$bin/agentqd" --role worker "${common[@]}" \
    --lease-ms 1000 --heartbeat-ms 100 --reclaim-idle-ms 500 --reclaim-interval-ms 200 --max-deliveries 2 \
    >>"$tmp/faulty_worker.log" 2>&1 &
  worker_pid=$!
  pids+=($worker_pid)
}
start_faulty_worker
job_file poison /ok ',"metadata":{"chaos":"poison-pill"}'
id=$(aq submit "$tmp/poison.json")
aq wait "$id" --timeout 60 >/dev/null 2>&1 &
waiter=$!
for _ in $(seq 1 400); do  # supervise: restart the worker each time the job kills it
  kill -0 "$waiter" 2>/dev/null || break
  kill -0 "$worker_pid" 2>/dev/null || { wait "$worker_pid" 2>/dev/null || true; start_faulty_worker; }
  sleep 0.1
done
set +e
wait "$waiter"
rc=$?
set -e
[ "$(status_of "$id")" = failed ] && [ "$rc" = 10 ] || fail "poison job: $(status_of "$id"), wait exit $rc"
echo "failed: poison job failed after repeated worker crashes, wait exit 10"
echo "ok"
