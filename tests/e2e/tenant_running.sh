#!/usr/bin/env bash
# e2e (#29): the per-tenant concurrent running jobs limit, global across workers. A real redis, an
# --role api agentqd (the control plane, --worker-token) and two --role worker agentqd (4 job slots
# each), all with --tenant-max-running 2: w2 a remote worker (--remote: its claims are protocol
# messages the control plane applies, a `held` outcome coming back in the reply), w1 a local one
# (direct store calls). Tenant ra submits 10 jobs and tenant rb 2 (its limit) before any worker runs;
# w2 starts alone, so its first read claims ra's jobs and gets `held` for those past 2 (they are
# accepted (202) and wait queued with a "waiting" event, code tenant_max_running); then w1 starts.
# Held jobs start as ra's running jobs finish, on either worker; rb is not held.
# Checked from the store's history (event ids order every claim and end): ra never had more than 2
# running at once; every job ran once (one claim, one end, attempts 1: no lost or duplicate jobs);
# the metrics show the limit and the holds. A negative limit is a start-up error.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd
need_model
need_tools redis-server redis-cli python3 curl

set +e
out=$("$bin/agentqd" --tenant-max-running -1 --model "$model" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "a negative --tenant-max-running was accepted"
grep -q -- "--tenant-max-running must be >= 0" <<<"$out" || fail "no message for a negative limit: $out"

start_redis
admin="aq_tenant_running_admin_0123456789ab"
common=(--redis "redis://127.0.0.1:$rport" --data-dir "$tmp/data" --admin-key "$admin" --rate-limit 0
        --heartbeat-ms 200 --tenant-max-running 2 --model "$model")
wtoken="wt_tenant_running_token_0123456789"
"$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/api_port" --worker-token "$wtoken" "${common[@]}" \
  >"$tmp/api.log" 2>&1 &
pids+=($!)
wait_file "$tmp/api_port"
base="http://127.0.0.1:$(cat "$tmp/api_port")"
for _ in $(seq 1 100); do curl -sf "$base/readyz" >/dev/null && break; sleep 0.1; done
admin_post() { curl -sf -H "Authorization: Bearer $admin" -H 'content-type: application/json' "$@"; }
key_a=$(admin_post -d '{"tenant":"ra"}' "$base/v1/keys" | field '["key"]') || fail "key for ra"
key_b=$(admin_post -d '{"tenant":"rb"}' "$base/v1/keys" | field '["key"]') || fail "key for rb"

# 10 jobs of ra and 2 of rb, all accepted (none rejected by the limit).
python3 - "$base" "$key_a" "$key_b" >"$tmp/ids" <<'PY' || fail "submits"
import json, sys, urllib.request
base, ka, kb = sys.argv[1:4]
body = json.dumps({"model": "stories260K", "messages": [{"role": "user", "content": "Once upon a time"}],
                   "max_turns": 1, "max_tokens_per_turn": 48}).encode()
for key, n in ((ka, 10), (kb, 2)):
    for _ in range(n):
        req = urllib.request.Request(base + "/v1/jobs", body, {"Authorization": "Bearer " + key,
                                                                "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            assert r.status == 202, r.status
            print(json.load(r)["id"])
PY
[ "$(wc -l <"$tmp/ids")" = 12 ] || fail "expected 12 accepted jobs: $(cat "$tmp/ids")"

# w2, remote (its own data dir: it opens no database), alone until it has held one of ra's jobs.
"$bin/agentqd" --role worker --worker-id w2 --max-jobs 4 --remote "$base" --control-plane-token "$wtoken" \
  --redis "redis://127.0.0.1:$rport" --data-dir "$tmp/w2" --rate-limit 0 --heartbeat-ms 200 --model "$model" \
  >"$tmp/w2.log" 2>&1 &
pids+=($!)
python3 - "$tmp/data/agentq.db" <<'PY' || fail "the remote worker held none of ra's jobs: $(tail -5 "$tmp/w2.log")"
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
for _ in range(300):
    n = db.execute("SELECT COUNT(*) FROM job_events WHERE type='waiting' AND data_json LIKE '%tenant_max_running%'"
                   ).fetchone()[0]
    if n > 0:
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY
[ -z "$(find "$tmp/w2" -name '*.db')" ] || fail "the remote worker's data dir holds a database"
"$bin/agentqd" --role worker --worker-id w1 --max-jobs 4 "${common[@]}" >"$tmp/w1.log" 2>&1 &
pids+=($!)

# Every job ends (held jobs start as ra's running ones finish); read from the store (the admin key
# is a tenant of its own and sees neither tenant's jobs).
python3 - "$tmp/data/agentq.db" <<'PY' || fail "not every job ended"
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
for _ in range(600):
    left = db.execute("SELECT COUNT(*) FROM jobs WHERE status IN ('queued','running')").fetchone()[0]
    if left == 0:
        break
    time.sleep(0.1)
rows = db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
assert all(st in ("completed", "incomplete") for st, _ in rows), rows
PY
api() { curl -sf -H "Authorization: Bearer $admin" "$@"; }

python3 - "$tmp/data/agentq.db" <<'PY' || fail "the history breaks the limit"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
jobs = {r[0]: r for r in db.execute("SELECT id, tenant, attempts, lease_owner, hold FROM jobs")}
assert len(jobs) == 12, len(jobs)
ev = db.execute("SELECT id, job_id, type, data_json FROM job_events WHERE type IN ('status','waiting') ORDER BY id").fetchall()
running, peak, claims, ends, waiting = {"ra": 0, "rb": 0}, {"ra": 0, "rb": 0}, {}, {}, {}
for eid, job, typ, data in ev:
    t = jobs[job][1]
    d = json.loads(data)
    if typ == "waiting":  # (the others say no worker serves the model yet: none had started)
        if d.get("code") == "tenant_max_running":
            waiting.setdefault(t, []).append(d)
        continue
    st = d["status"]
    if st == "running":
        running[t] += 1
        claims[job] = claims.get(job, 0) + 1
    elif st in ("completed", "incomplete", "failed", "cancelled"):
        running[t] -= 1
        ends[job] = ends.get(job, 0) + 1
    peak[t] = max(peak[t], running[t])
assert all(claims.get(j) == 1 and ends.get(j) == 1 for j in jobs), (claims, ends)
assert all(r[2] == 1 for r in jobs.values()), [(r[0], r[2]) for r in jobs.values()]
assert all(r[4] == 0 for r in jobs.values()), "a finished job still marked held"
assert peak["ra"] <= 2, f"ra had {peak['ra']} jobs running at once (limit 2)"
held = waiting.get("ra", [])
assert len(held) >= 1 and all(w["limit"] == 2 for w in held), held
assert "--tenant-max-running" in held[0]["reason"], held[0]
assert not waiting.get("rb"), f"rb was held: {waiting.get('rb')}"
held_jobs = {j for j in jobs if any(e[1] == j and e[2] == "waiting" and "tenant_max_running" in e[3] for e in ev)}
assert held_jobs and all(claims.get(j) == 1 and ends.get(j) == 1 for j in held_jobs), held_jobs
owners = sorted({r[3] for r in jobs.values() if r[1] == "ra"})
print(f"ra: peak {peak['ra']} running (limit 2), {len(held)} jobs waited; rb: peak {peak['rb']}, none waited; "
      f"ra ran on {owners}; every job claimed once and ended once, the {len(held_jobs)} held ones too")
PY

# Metrics: the limit (API), held jobs now (none left), holds counted by the workers (sampled ~1 s).
for _ in $(seq 1 50); do
  api "$base/metrics" >"$tmp/metrics"
  grep -q '^agentq_jobs_held_total{' "$tmp/metrics" && break
  sleep 0.2
done
grep -q '^agentq_quota_tenant_max_running 2' "$tmp/metrics" || fail "limit gauge: $(grep tenant_max "$tmp/metrics")"
grep -q '^agentq_jobs_held 0' "$tmp/metrics" || fail "held gauge: $(grep jobs_held "$tmp/metrics")"
n_holds=$(awk '/^agentq_jobs_held_total\{/ {s += $NF} END {print s + 0}' "$tmp/metrics")
[ "$n_holds" -ge 1 ] || fail "holds counter: $(grep jobs_held_total "$tmp/metrics")"
# The remote worker's own holds (its metrics reach the control plane as messages, label worker="w2").
for _ in $(seq 1 50); do
  grep -q '^agentq_jobs_held_total{.*worker="w2"' "$tmp/metrics" && break
  sleep 0.2
  api "$base/metrics" >"$tmp/metrics"
done
n_remote=$(awk '/^agentq_jobs_held_total\{.*worker="w2"/ {s += $NF} END {print s + 0}' "$tmp/metrics")
[ "$n_remote" -ge 1 ] || fail "no hold counted by the remote worker w2: $(grep jobs_held_total "$tmp/metrics")"
echo "tenant max running: ok ($n_holds holds counted by the workers, $n_remote by the remote one)"
