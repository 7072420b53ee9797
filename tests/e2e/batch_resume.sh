#!/usr/bin/env bash
# e2e: a batch's acceptance survives a crash (issue 29). agentqd (--role api: nothing runs the jobs)
# takes a 20,000-line batch file; it dies (AGENTQ_FAULT=after_batch_chunk: _exit(137), as a kill)
# once the first chunk of jobs is committed and is restarted on the same data dir: the batch
# finishes accepting from its resume point, with exactly one job per line (no line lost, none
# twice). NOTE: a fault point, not a timed SIGKILL: acceptance of 20,000 lines now takes well under a
# second, faster than the test could poll for the first commit. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v sqlite3 >/dev/null || skip "no sqlite3 CLI"
n=20000
AGENTQ_FAULT=after_batch_chunk agentqd_start batch-resume --role api --rate-limit 0
key=$(curl -fsS -X POST -H "Authorization: Bearer $admin_key" -H 'content-type: application/json' \
  -d '{"tenant":"resume"}' "$AGENTQ_URL/v1/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
python3 - "$n" >"$tmp/in.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "stories260K", "max_tokens": 1, "messages": [{"role": "user", "content": f"doc {i}"}]}}))
PY
file_id=$(curl -fsS -H "Authorization: Bearer $key" -F purpose=batch -F "file=@$tmp/in.jsonl" "$AGENTQ_URL/v1/files" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
batch_id=$(curl -fsS -H "Authorization: Bearer $key" -H 'content-type: application/json' \
  -d "{\"input_file_id\":\"$file_id\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}" \
  "$AGENTQ_URL/v1/batches" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
db="$tmp/data/agentq.db"
q() { sqlite3 -cmd '.timeout 5000' "$db" "$1"; }
for _ in $(seq 1 600); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; echo "the fault point was not reached"; tail -n 30 "$tmp/agentqd.log"; exit 1; }
wait "$pid" 2>/dev/null || true
at_kill=$(q "SELECT n_accepted FROM batches WHERE id='$batch_id'")
echo "killed with $at_kill of $n lines accepted"
[ "$at_kill" -gt 0 ] && [ "$at_kill" -lt "$n" ] || { echo "expected a partial acceptance"; tail -n 30 "$tmp/agentqd.log"; exit 1; }
rm -f "$tmp/port"
"$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
  --admin-key "$admin_key" --role api --rate-limit 0 >>"$tmp/agentqd.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ "$(q "SELECT status FROM batches WHERE id='$batch_id'")" != validating ] && break
  sleep 0.1
done
status=$(q "SELECT status FROM batches WHERE id='$batch_id'")
counts=$(q "SELECT COUNT(*)||' '||COUNT(DISTINCT custom_id)||' '||COUNT(DISTINCT job_id) FROM batch_jobs WHERE batch_id='$batch_id'")
n_jobs=$(q "SELECT COUNT(*) FROM jobs")
echo "after restart: status=$status batch_jobs(rows, custom_ids, jobs)=$counts jobs=$n_jobs"
if [ "$status" != in_progress ] || [ "$counts" != "$n $n $n" ] || [ "$n_jobs" != "$n" ]; then
  tail -n 30 "$tmp/agentqd.log"
  exit 1
fi
