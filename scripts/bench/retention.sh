#!/usr/bin/env bash
# Retention and backup (issue 33) on one all-in-one agentqd (embedded redis-server, temp data dir):
#  - deleting N expired jobs (seeded 40 days old: request, result, 3 transcript rows, 3 events each):
#    wall time from agentqd's start until agentq_jobs_deleted_total{reason="expired"} reaches N, and
#    submit p99 at a fixed rate during the deletion vs the same load without deletion (same run,
#    same seeded database, --retention-days 0 first);
#  - backup throughput (agentqd backup, online) vs a plain cp of the same file.
# Ends with one JSON line.
#   scripts/bench/retention.sh [--quick]   (quick: 10,000 jobs, 20 req/s for 5 s; full: 100,000, 20 req/s for 20 s)
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=100000; rate=20; seconds=20
[ "${1:-}" = "--quick" ] && { n=10000; rate=20; seconds=5; }
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
[ -x "$bin/agentqd" ] || { echo "retention.sh: missing $bin/agentqd" >&2; exit 1; }
source scripts/bench/agentqd_bench.sh
bench_init rbench
ms() { date +%s%3N; }

start() { bench_start "$bin" "$tmp/data" "$@"; }   # sets pid and url
stop() { bench_stop; }

start --retention-days 0   # creates the schema
key=$(bench_key bench)
stop
echo "== seeding $n expired jobs" >&2
python3 scripts/bench/retention.py seed "$tmp/data/agentq.db" "$n"
db_bytes_seeded=$(stat -c %s "$tmp/data/agentq.db")

start --retention-days 0
echo "== backup vs cp of the same ${db_bytes_seeded}-byte file (agentqd running)" >&2
t0=$(ms); "$bin/agentqd" backup --data-dir "$tmp/data" --to "$tmp/backup.db" | tee "$tmp/backup.out" >&2; t1=$(ms)
# the copy itself (backup API + quick_check + fsync), as agentqd backup reports it, without process start-up
backup_inner_ms=$(sed -n 's/.* in \([0-9.]*\) s,.*/\1/p' "$tmp/backup.out" | python3 -c 'import sys; print(int(float(sys.stdin.read())*1000))')
cat "$tmp/data/agentq.db" > /dev/null
t2=$(ms); cp "$tmp/data/agentq.db" "$tmp/copy.db"; sync "$tmp/copy.db"; t3=$(ms)
backup_ms=$((t1 - t0)); copy_ms=$((t3 - t2))
echo "== baseline: $rate req/s for $seconds s, no deletion" >&2
base=$(python3 scripts/bench/retention.py latency "$url" "$key" "$rate" "$seconds" | tail -n 1)
stop

echo "== deletion: --retention-days 30 while $rate req/s for $seconds s" >&2
t_start=$(ms)
start --retention-days 30
python3 scripts/bench/retention.py latency "$url" "$key" "$rate" "$seconds" > "$tmp/during.json" &
lat_pid=$!
deleted=0; t_done=0
for _ in $(seq 1 6000); do
  deleted=$(python3 scripts/bench/retention.py deleted "$url" | python3 -c 'import json,sys; print(json.load(sys.stdin)["deleted"])')
  [ "$deleted" -ge "$n" ] && { t_done=$(ms); break; }
  sleep 0.1
done
wait "$lat_pid"
during=$(tail -n 1 "$tmp/during.json")
sleep 1
after=$(python3 scripts/bench/retention.py deleted "$url")
stop

python3 - "$n" "$deleted" "$t_start" "$t_done" "$base" "$during" "$after" "$db_bytes_seeded" "$backup_ms" "$copy_ms" \
  "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" "$backup_inner_ms" <<'PY'
import json, sys
n, deleted, t_start, t_done = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
base, during, after = json.loads(sys.argv[5]), json.loads(sys.argv[6]), json.loads(sys.argv[7])
size, backup_ms, copy_ms = int(sys.argv[8]), max(1, int(sys.argv[9])), max(1, int(sys.argv[10]))
wall = (t_done - t_start) / 1000 if t_done else None
mb = size / 1e6
print(json.dumps({
    "bench": "retention", "host_cpu": sys.argv[12], "n_cpus": int(sys.argv[11]),
    "jobs": n, "deleted": deleted, "delete_wall_s": wall,
    "deleted_per_s": round(n / wall, 1) if wall else None,
    "submit_p99_ms_baseline": base["p99_ms"], "submit_p99_ms_during_delete": during["p99_ms"],
    "submit_p50_ms_baseline": base["p50_ms"], "submit_p50_ms_during_delete": during["p50_ms"],
    "p99_ratio_during_vs_baseline": round(during["p99_ms"] / max(1e-9, base["p99_ms"]), 2),
    "db_bytes_seeded": size, "db_bytes_after": after["db_bytes"], "db_free_pages_after": after["free_pages"],
    "backup_mb_per_s": round(mb / (backup_ms / 1000), 1),
    "backup_copy_only_mb_per_s": round(mb / (max(1, int(sys.argv[13])) / 1000), 1),
    "copy_mb_per_s": round(mb / (copy_ms / 1000), 1),
    "backup_vs_copy": round(copy_ms / backup_ms, 2)}, separators=(",", ":")))
PY
