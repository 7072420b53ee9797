#!/usr/bin/env bash
# Where agentqd's CPU per one-request job goes, by thread name: CPU-ms, ms runnable but waiting for a
# CPU, and voluntary / involuntary context switches per job while scripts/bench/queue_node.mjs jobs (the node client of queue.sh's
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
# per thread: name, voluntary and involuntary switches, ns on a CPU, ns runnable but not running.
# NOTE: schedstat, not stat's utime + stime: those are whole clock ticks per thread (10 ms), and 64 job
# threads' truncations hide their whole share (a stat-based table showed aq-job at 0.000-0.05 ms/job).
snap() {
  for t in /proc/"$pid"/task/*; do
    echo "$(cat "$t/comm") $(awk '/^voluntary_ctxt/{v=$2}/^nonvoluntary_ctxt/{n=$2}END{print v, n}' "$t/status") \
$(awk '{print $1, $2}' "$t/schedstat")"
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
python3 - "$tmp/a" "$tmp/b" "$n" "$tmp/run.json" <<'PY'
import collections, json, sys
n = int(sys.argv[3])
def load(p):
    d = collections.defaultdict(lambda: [0, 0, 0, 0, 0])
    for line in open(p):
        name, v, nv, run, wait = line.rsplit(None, 4)
        x = d[name]
        x[0] += int(v); x[1] += int(nv); x[2] += int(run); x[3] += int(wait); x[4] += 1
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
print(f"{'thread':20s} {'n':>3s} {'vol/job':>8s} {'invol/job':>9s} {'cpu_ms/job':>10s} {'wait_ms/job':>11s}")
tot = [0, 0, 0, 0]
zero = [0, 0, 0, 0, 0]
for name in sorted(b, key=lambda k: -(b[k][2] - a.get(k, zero)[2])):
    x, y = b[name], a.get(name, zero)
    d = [x[i] - y[i] for i in range(4)]
    tot = [tot[i] + d[i] for i in range(4)]
    if any(d):
        print(f"{name:20s} {x[4]:3d} {d[0] / n:8.2f} {d[1] / n:9.2f} {d[2] / 1e6 / n:10.3f} {d[3] / 1e6 / n:11.3f}")
print(f"{'agentqd total':20s} {'':3s} {tot[0] / n:8.2f} {tot[1] / n:9.2f} {tot[2] / 1e6 / n:10.3f} {tot[3] / 1e6 / n:11.3f}")
r = json.load(open(sys.argv[4]))
# the process's own figure (/proc/PID/stat, first submit to the last job terminal: no listing) beside it
print(f"agentqd (process) cpu_ms/job {r.get('agentqd_cpu_ms_per_job')}, redis-server {r.get('redis_cpu_ms_per_job')}, "
      f"node client {r.get('client_cpu_ms_per_job')}; {r['jobs_per_s']} jobs/s")
PY
