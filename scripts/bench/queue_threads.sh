#!/usr/bin/env bash
# Where agentqd's CPU per one-request job goes, by thread name: CPU-ms, ms runnable but waiting for a
# CPU, and voluntary / involuntary context switches per job while scripts/bench/queue_node.mjs jobs
# (the node client of queue.sh's headline figure: 16 keep-alive connections) runs JOBS 1-token jobs
# end to end, after a warm-up of 1,000; beside them the process's own total, its embedded
# redis-server's and the client's. Not JSON: a table for the docs.
#   scripts/bench/queue_threads.sh [JOBS] [CLIENTS]   (default 5000 16; AGENTQ_BIN_DIR as queue.sh;
#   AGENTQD_ARGS: extra agentqd flags, e.g. "--http-threads 16")
# NOTE: the window is the client's (first submit to the last job seen terminal), read by the client
# itself (--threads 1), so it holds neither the warm-up nor the listing that reads the results back.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}; clients=${2:-16}
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
# shellcheck source=scripts/bench/agentqd_bench.sh
source scripts/bench/agentqd_bench.sh
bench_init qthreads
# shellcheck disable=SC2086  # AGENTQD_ARGS is a list of flags
bench_start "$bin" "$tmp/data" ${AGENTQD_ARGS:-}
key=$(bench_key threads)
redis_pid=$(pgrep -P "$pid" -x redis-server | head -n 1 || true)
node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs 1000 --clients "$clients" \
  --tag w >/dev/null
echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs "$n" --clients "$clients" \
  --pid "$pid" ${redis_pid:+--redis-pid "$redis_pid"} --threads 1 >"$tmp/run.json"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$tmp/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["threads_per_job"]
print(f"{'thread':20s} {'n':>3s} {'vol/job':>8s} {'invol/job':>9s} {'cpu_ms/job':>10s} {'wait_ms/job':>11s}")
for name in sorted(t, key=lambda k: -t[k]["cpu_ms"]):
    x = t[name]
    if x["cpu_ms"] or x["vol"] or x["invol"]:
        print(f"{name:20s} {x['threads']:3d} {x['vol']:8.2f} {x['invol']:9.2f} {x['cpu_ms']:10.3f} {x['wait_ms']:11.3f}")
tot = {k: sum(x[k] for x in t.values()) for k in ("vol", "invol", "cpu_ms", "wait_ms")}
print(f"{'agentqd threads':20s} {'':3s} {tot['vol']:8.2f} {tot['invol']:9.2f} {tot['cpu_ms']:10.3f} {tot['wait_ms']:11.3f}")
print(f"agentqd (process, /proc/PID/stat) cpu_ms/job {r.get('agentqd_cpu_ms_per_job')}, redis-server "
      f"{r.get('redis_cpu_ms_per_job')}, node client {r.get('client_cpu_ms_per_job')}; {r['jobs_per_s']} jobs/s, "
      f"submits {r['submit_per_s']}/s")
PY
