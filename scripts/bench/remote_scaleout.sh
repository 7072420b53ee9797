#!/usr/bin/env bash
# Scale-out with remote workers (#28): one control plane (--role api --worker-token) and 1, 2, 4
# remote worker processes (--remote, --engine-threads 1 each, own data dirs) on the tiny model
# (stories260K), one redis-server; N jobs of 16 output tokens submitted at once, timed to the last
# terminal state. Per worker count: jobs/s, generated tokens/s, and the control plane's CPU seconds
# (utime + stime from /proc, so other load on the box does not inflate it) per 1,000 jobs. All
# processes share this host: figures say what the control plane costs, not what N hosts would give.
# KV-affine resume (#28), with the largest worker count: RESUME jobs with a client tool (forced
# call, requires_action), their tool outputs submitted once all wait, then run to the end; per job,
# whether the turn after the tool result ran on the worker that ran (and parked the KV of) the
# turn before it (the claims' "worker" in job_events), and the second turn's cached / computed
# prompt tokens (its usage in the transcript).
# Ends with one JSON line.   scripts/bench/remote_scaleout.sh [JOBS=300] [COUNTS="1 2 4"] [RESUME=40]
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
n_jobs=${1:-300}
counts=${2:-"1 2 4"}
n_resume=${3:-40}
max_count=$(printf '%s\n' $counts | sort -n | tail -1)
bin="${AGENTQ_BIN_DIR:-build/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
[ -x "$bin/agentqd" ] || { echo "remote_scaleout.sh: missing $bin/agentqd" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "remote_scaleout.sh: redis-server not found" >&2; exit 1; }
tmp=$(mktemp -d -t agentq-scaleout-XXXXXX)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }  # NOTE: assumes 100 clock ticks/s (getconf CLK_TCK)

results="[]"
for n in $counts; do
  run="$tmp/run$n"
  mkdir -p "$run"
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$run" --appendonly yes --save "" --logfile "$run/redis.log" &
  pids+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  admin="aq_scaleout_admin_0123456789abcdef"
  token="wt_scaleout_$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  "$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$run/port" --data-dir "$run/cp" --redis "redis://127.0.0.1:$rport" \
    --model "$model" --admin-key "$admin" --rate-limit 0 --worker-token "$token" --log-level warn >"$run/cp.log" 2>&1 &
  cp_pid=$!
  pids+=($cp_pid)
  for _ in $(seq 1 300); do [ -s "$run/port" ] && break; sleep 0.1; done
  url="http://127.0.0.1:$(cat "$run/port")"
  for i in $(seq 1 "$n"); do
    "$bin/agentqd" --role worker --remote "$url" --control-plane-token "$token" --data-dir "$run/w$i" --worker-id "w$i" \
      --redis "redis://127.0.0.1:$rport" --model "$model" --engine-threads 1 --log-level warn >"$run/w$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 2  # workers up (model load, first heartbeat)
  cpu0=$(cpu_s "$cp_pid")
  fig=$(python3 - "$url" "$admin" "$n_jobs" <<'PY'
import http.client, json, sys, time, urllib.parse
url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
u = urllib.parse.urlparse(url)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
def call(method, path, body=None):
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); return r.status, json.loads(r.read())
t0 = time.time(); ids = []
for i in range(n):
    s, j = call("POST", "/v1/jobs", {"model": "stories260K", "messages": [{"role": "user", "content": f"Once upon a time {i}"}],
                                     "max_turns": 1, "max_tokens_per_turn": 16})
    assert s == 202, (s, j); ids.append(j["id"])
pending, tokens, failed = set(ids), 0, 0
while pending:
    for jid in list(pending):
        s, j = call("GET", f"/v1/jobs/{jid}")
        if j["status"] in ("completed", "incomplete", "failed", "cancelled"):
            pending.discard(jid); tokens += (j.get("usage") or {}).get("completion_tokens", 0); failed += j["status"] == "failed"
    if pending: time.sleep(0.05)
    if time.time() - t0 > 600: raise SystemExit("timeout")
dt = time.time() - t0
print(json.dumps({"seconds": round(dt, 2), "jobs_per_s": round(n / dt, 1), "tokens_per_s": round(tokens / dt, 1), "failed": failed}))
PY
)
  cpu1=$(cpu_s "$cp_pid")
  dbs=$(find "$run"/w* \( -name '*.db' -o -name '*.sqlite*' \) | wc -l)
  fig=$(python3 -c "import json,sys; f=json.loads(sys.argv[1]); f.update(workers=$n, jobs=$n_jobs, cp_cpu_s_per_1000_jobs=round(($cpu1-$cpu0)*1000/$n_jobs,2), worker_db_files=$dbs); print(json.dumps(f))" "$fig")
  if [ "$n" = "$max_count" ] && [ "$n_resume" -gt 0 ]; then
    resume=$(python3 - "$url" "$admin" "$n_resume" "$run/cp/agentq.db" <<'PY'
import http.client, json, sqlite3, sys, time, urllib.parse
url, key, n, db = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
u = urllib.parse.urlparse(url)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
def call(method, path, body=None):
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); return r.status, json.loads(r.read())
tool = {"type": "function", "function": {"name": "look", "parameters": {"type": "object",
        "properties": {"q": {"enum": ["Paris", "London"]}}, "required": ["q"]}}}
ids = []
for i in range(n):
    s, j = call("POST", "/v1/jobs", {"model": "stories260K", "messages": [{"role": "user", "content": f"Once upon a time {i} " * 8}],
                                     "tools": [tool], "tool_choice": "required", "parallel_tool_calls": False,
                                     "max_turns": 2, "max_tokens_per_turn": 128})
    assert s == 202, (s, j); ids.append(j["id"])
def wait(pred, what):
    t0 = time.time(); left = set(ids)
    while left:
        for jid in list(left):
            if pred(call("GET", f"/v1/jobs/{jid}")[1]): left.discard(jid)
        if left: time.sleep(0.05)
        if time.time() - t0 > 300: raise SystemExit(f"timeout waiting for {what}: {len(left)} left")
terminal = ("completed", "incomplete", "failed", "cancelled")
wait(lambda j: j["status"] in ("requires_action",) + terminal, "requires_action")
t0 = time.time(); n_resumed = 0
for jid in ids:
    s, j = call("GET", f"/v1/jobs/{jid}")
    if j["status"] != "requires_action": continue
    outs = [{"tool_call_id": tc["id"], "output": "sunny"} for tc in j["required_action"]["tool_calls"]]
    s, r = call("POST", f"/v1/jobs/{jid}/tool_outputs", {"tool_outputs": outs}); assert s < 300, (s, r)
    n_resumed += 1
wait(lambda j: j["status"] in terminal, "the end")
dt = time.time() - t0
ends = {}
for jid in ids:
    st = call("GET", f"/v1/jobs/{jid}")[1]["status"]; ends[st] = ends.get(st, 0) + 1
con = sqlite3.connect(db)
affine, moved, cached, computed = 0, 0, [], []
for jid in ids:
    workers = [json.loads(d).get("worker") for (d,) in con.execute(
        "SELECT data_json FROM job_events WHERE job_id=? AND type='status' AND json_extract(data_json,'$.status')='running' ORDER BY id", (jid,))
        if json.loads(d).get("worker")]
    if len(workers) < 2: continue
    affine += workers[1] == workers[0]; moved += workers[1] != workers[0]
    row = con.execute("SELECT usage_json FROM transcript WHERE job_id=? AND role='assistant' AND turn_idx=1", (jid,)).fetchone()
    if row and row[0]:
        u = json.loads(row[0]); cached.append(u.get("cached_tokens", 0)); computed.append(u.get("computed_tokens", 0))
mean = lambda v: round(sum(v) / len(v), 1) if v else None
print(json.dumps({"resume_jobs": n, "resumed": n_resumed, "affine": affine, "moved": moved,
                  "affine_rate": round(affine / max(1, affine + moved), 3), "resume_seconds": round(dt, 2), "resume_ends": ends,
                  "turn2_cached_tokens_mean": mean(cached), "turn2_computed_tokens_mean": mean(computed)}))
PY
)
    fig=$(python3 -c "import json,sys; f=json.loads(sys.argv[1]); f.update(json.loads(sys.argv[2])); print(json.dumps(f))" "$fig" "$resume")
  fi
  echo "$fig" >&2
  results=$(python3 -c "import json,sys; r=json.loads(sys.argv[1]); r.append(json.loads(sys.argv[2])); print(json.dumps(r))" "$results" "$fig")
  stop_all
done
python3 -c "import json,os,sys; print(json.dumps({'bench':'remote_scaleout','model':'stories260K','load_avg':os.getloadavg()[0],'nproc':os.cpu_count(),'runs':json.loads(sys.argv[1])}))" "$results"
