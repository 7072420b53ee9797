#!/usr/bin/env bash
# Job queue end to end: trivial jobs (1 output token, stories260K) through HTTP -> SQLite ->
# Redis -> worker on one all-in-one agentqd (embedded redis-server, temp data dir, loopback),
# vs a no-op floor measured in the same run (GET /healthz rate), and submit latency
# percentiles at a fixed request rate (scripts/bench/loadgen.py). Ends with one JSON line, which
# also states the durability settings the run had ("durability": SQLite journal mode read from
# the database file, its synchronous level from the store's source, redis-server's persistence
# settings asked of the running server with CONFIG GET).
# Then the Batch figure (issue 29, scripts/bench/batch_accept.py): an N-line batch file uploaded
# (POST /v1/files) and accepted as durable jobs (POST /v1/batches until it leaves "validating"):
# seconds, lines/s, agentqd CPU seconds (the box's other load does not inflate those) and peak RSS.
#   scripts/bench/queue.sh [--quick]   (quick: 200 jobs, 20 req/s for 5 s, a 20,000-line batch;
#                                       full: 500 jobs, 50 req/s for 10 s, a 100,000-line batch)
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$(pwd)
jobs=500; rate=50; seconds=10; batch_lines=100000
[ "${1:-}" = "--quick" ] && { jobs=200; rate=20; seconds=5; batch_lines=20000; }
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
for b in agentqd; do
  [ -x "$bin/$b" ] || { echo "queue.sh: missing $bin/$b (cmake --build build --target $b)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "queue.sh: redis-server not found" >&2; exit 1; }

tmp=$(mktemp -d -t agentq-qbench-XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$tmp"
}
trap cleanup EXIT

admin_key="aq_bench_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
# NOTE: --rate-limit 0: the per-key token bucket would otherwise be what is measured.
"$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
  --admin-key "$admin_key" --rate-limit 0 --log-level warn >"$tmp/agentqd.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "queue.sh: agentqd did not start" >&2; tail -20 "$tmp/agentqd.log" >&2; exit 1; }
url="http://127.0.0.1:$(cat "$tmp/port")"
for _ in $(seq 1 100); do
  curl -fsS "$url/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
key=$(python3 - "$url" "$admin_key" <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
c.request("POST", "/v1/keys", body=json.dumps({"tenant": "bench"}),
          headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
r = c.getresponse()
body = r.read()
assert r.status in (200, 201), (r.status, body)
print(json.loads(body)["key"])
PY
)
echo "== agentqd on $url; $jobs jobs, then $rate req/s for $seconds s" >&2
result=$(python3 scripts/bench/loadgen.py --url "$url" --key "$key" --model stories260K --jobs "$jobs" \
  --rate "$rate" --seconds "$seconds" --clients 4 | tail -n 1)
echo "== a $batch_lines-line batch: upload and acceptance" >&2
batch=$(python3 scripts/bench/batch_accept.py --url "$url" --key "$key" --model stories260K --lines "$batch_lines" \
  --pid "$pid" | tail -n 1)
# NOTE: the embedded redis-server is agentqd's child (its process title names its port); the
# settings are asked of it, so they are what the run used.
redis_cfg=""
redis_pid=$(pgrep -P "$pid" -x redis-server | head -n 1 || true)
redis_port=$([ -n "$redis_pid" ] && tr '\0' ' ' <"/proc/$redis_pid/cmdline" | grep -o ':[0-9]\+' | head -n 1 | tr -d : || true)
if [ -n "$redis_port" ] && command -v redis-cli >/dev/null; then
  for k in appendonly appendfsync save; do
    redis_cfg+="--$k $(redis-cli -p "$redis_port" config get "$k" 2>/dev/null | sed -n 2p | tr ' ' _) "
  done
fi
sync_level=$(grep -ho 'PRAGMA synchronous=[A-Z]*' service/store/conn.h service/store/store.cpp | head -n 1 | cut -d= -f2)
python3 - "$result" "$tmp/data/agentq.db" "$redis_cfg" "${sync_level:-unknown}" "$batch" <<'PY'
import json, sys
out = json.loads(sys.argv[1])
out["batch"] = json.loads(sys.argv[5])
db, args, sync = sys.argv[2], sys.argv[3].split(), sys.argv[4]
try:
    with open(db, "rb") as f:
        hdr = f.read(20)
    journal = "wal" if len(hdr) == 20 and hdr[18] == 2 and hdr[19] == 2 else "rollback"
except OSError:
    journal = "unknown"
def flag(name):
    i = args.index(name) if name in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 and not args[i + 1].startswith("--") else ("" if i >= 0 else None)
out["durability"] = {
    "sqlite_journal_mode": journal, "sqlite_synchronous": sync.lower(),
    "redis_appendonly": flag("--appendonly"), "redis_appendfsync": flag("--appendfsync"),
    "redis_save": flag("--save"),  # "" = no RDB snapshots
}
print(json.dumps(out, separators=(",", ":")))
PY
