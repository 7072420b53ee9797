#!/usr/bin/env bash
# Where agentqd's CPU goes on the queue paths (issue 29; docs/queue_perf.md): perf samples of the whole
# process (every thread, call graphs) while (1) N one-request-per-job 1-token jobs go submit -> publish
# -> claim -> turn -> terminal (scripts/bench/loadgen.py), and (2) an L-line batch file is accepted
# (scripts/bench/batch_accept.py). Prints, per phase, agentqd's CPU seconds per 1,000 jobs and the top
# functions by self time (perf report --no-children), then one JSON line.
#   scripts/bench/queue_profile.sh [JOBS] [LINES]     (default 2000, 50000); needs perf (linux-perf)
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared), PROFILE_TOP (25).
set -euo pipefail
cd "$(dirname "$0")/../.."
n_jobs=${1:-2000}
n_lines=${2:-50000}
top=${PROFILE_TOP:-25}
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
command -v perf >/dev/null || { echo "queue_profile.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$bin/agentqd" ] || { echo "queue_profile.sh: missing $bin/agentqd" >&2; exit 1; }
source scripts/bench/agentqd_bench.sh
bench_init qprof
bench_start "$bin" "$tmp/data"
key=$(bench_key prof)

profile() {  # name, command...: perf over agentqd while the command runs; CPU seconds to $tmp/name.cpu
  local name=$1
  shift
  local c0
  c0=$(bench_cpu)
  perf record -q -F 499 -g -p "$pid" -o "$tmp/$name.data" >/dev/null 2>&1 &
  local perf_pid=$!
  sleep 0.5
  "$@" >"$tmp/$name.out"
  kill -INT "$perf_pid"
  wait "$perf_pid" 2>/dev/null || true
  echo "scale=3; ($(bench_cpu) - $c0) / $tck" | bc >"$tmp/$name.cpu"
  echo "== $name: agentqd CPU $(cat "$tmp/$name.cpu") s; top $top functions by self time (% of samples)" >&2
  perf report -i "$tmp/$name.data" --no-children --sort symbol --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | sed 's/  */ /g; s/ - - $//' | head -n "$top" >&2 || true
  echo "-- by shared object" >&2
  perf report -i "$tmp/$name.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' |
    sed 's/  */ /g' | head -n 8 >&2 || true
}
profile jobs python3 scripts/bench/loadgen.py --url "$url" --key "$key" --model stories260K --jobs "$n_jobs" \
  --phases throughput --clients 8
profile batch python3 scripts/bench/batch_accept.py --url "$url" --key "$key" --model stories260K --lines "$n_lines" \
  --pid "$pid"
python3 - "$n_jobs" "$(cat "$tmp/jobs.cpu")" "$n_lines" "$(cat "$tmp/batch.cpu")" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
n_jobs, cpu_jobs, n_lines, cpu_batch, load = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
print(json.dumps({"bench": "queue_profile", "jobs": n_jobs, "cpu_s_per_1000_jobs": round(1000 * cpu_jobs / n_jobs, 3),
                  "batch_lines": n_lines, "cpu_s_per_1000_batch_lines_upload_and_accept": round(1000 * cpu_batch / n_lines, 3),
                  "load_avg_1m": float(load)}, separators=(",", ":")))
PY
