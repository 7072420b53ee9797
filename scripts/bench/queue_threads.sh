#!/usr/bin/env bash
# Where agentqd's CPU per one-request job goes, by thread name: CPU-ms and voluntary / involuntary
# context switches per job while scripts/bench/queue_node.mjs jobs (the node client of queue.sh's
# headline figure: 16 keep-alive connections) runs JOBS 1-token jobs end to end, after a warm-up of
# 1,000; then the same for its embedded redis-server and the client. Not JSON: a table for the docs.
#   scripts/bench/queue_threads.sh [JOBS] [CLIENTS]   (default 5000 16; AGENTQ_BIN_DIR as queue.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}; clients=${2:-16}
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
# shellcheck source=scripts/bench/agentqd_bench.sh
source scripts/bench/agentqd_bench.sh
bench_init qthreads
bench_start "$bin" "$tmp/data"
key=$(bench_key threads)
redis_pid=$(pgrep -P "$pid" -x redis-server | head -n 1 || true)
# per thread: name, voluntary and involuntary switches, user + system ticks
snap() {
  for t in /proc/"$pid"/task/*; do
    echo "$(cat "$t/comm") $(awk '/^voluntary_ctxt/{v=$2}/^nonvoluntary_ctxt/{n=$2}END{print v, n}' "$t/status") \
$(awk '{print $14 + $15}' "$t/stat")"
  done 2>/dev/null | sort
}
node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs 1000 --clients "$clients" \
  --tag w >/dev/null
echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
snap >"$tmp/a"
node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs "$n" --clients "$clients" \
  --pid "$pid" ${redis_pid:+--redis-pid "$redis_pid"} | tee "$tmp/run.json" >&2
snap >"$tmp/b"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# NOTE: the snapshots also hold the run's last poll and its listing of the results (n/100 GETs):
# about 1 % of the requests, and GETs are cheaper than a job.
python3 - "$tmp/a" "$tmp/b" "$n" "$tck" "$tmp/run.json" <<'PY'
import collections, json, sys
n, tck = int(sys.argv[3]), int(sys.argv[4])
def load(p):
    d = collections.defaultdict(lambda: [0, 0, 0, 0])
    for line in open(p):
        name, v, nv, t = line.rsplit(None, 3)
        x = d[name]
        x[0] += int(v); x[1] += int(nv); x[2] += int(t); x[3] += 1
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
print(f"{'thread':20s} {'n':>3s} {'vol/job':>8s} {'invol/job':>9s} {'cpu_ms/job':>10s}")
tot = [0, 0, 0]
for name in sorted(b, key=lambda k: -(b[k][2] - a.get(k, [0, 0, 0, 0])[2])):
    x, y = b[name], a.get(name, [0, 0, 0, 0])
    dv, dn, dt = x[0] - y[0], x[1] - y[1], x[2] - y[2]
    tot = [tot[0] + dv, tot[1] + dn, tot[2] + dt]
    if dv + dn + dt:
        print(f"{name:20s} {x[3]:3d} {dv / n:8.2f} {dn / n:9.2f} {dt * 1000 / tck / n:10.3f}")
print(f"{'agentqd total':20s} {'':3s} {tot[0] / n:8.2f} {tot[1] / n:9.2f} {tot[2] * 1000 / tck / n:10.3f}")
r = json.load(open(sys.argv[5]))
print(f"redis-server cpu_ms/job {r.get('redis_cpu_ms_per_job')}, node client cpu_ms/job {r.get('client_cpu_ms_per_job')}, "
      f"{r['jobs_per_s']} jobs/s")
PY
