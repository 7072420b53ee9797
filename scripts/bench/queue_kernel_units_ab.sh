#!/usr/bin/env bash
# Paired A/B of agentqd's CPU per one-request job by thread, in units of the model's own kernel
# (issue 29, docs/queue_perf.md "Session 30"). On a shared VM the CPU-ms a job moves +-30 % between
# runs of the same binary with the host's speed (the node client's own CPU per job moves as much), so
# a few pairs of queue_threads.sh cannot resolve a 5 % change. Here each run is profiled (perf,
# cpu-clock) and every thread's samples are divided by the samples of the tiny model's matmul kernel
# in the same run: the model does the same work per job in A and B, so the ratio cancels the host's
# speed. Per run: 1,000 jobs' warm-up, then JOBS one-request jobs from the node client (16
# connections), as queue_threads.sh.
#   scripts/bench/queue_kernel_units_ab.sh BIN_DIR_A BIN_DIR_B [ROUNDS] [JOBS]   (default 3, 5000)
# Prints a line per run (total and the top threads, in kernel units) and the medians per side.
# Needs perf; exits 77 without it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin_a=$1
bin_b=$2
rounds=${3:-3}
n=${4:-5000}
command -v perf >/dev/null || { echo "queue_kernel_units_ab.sh: perf not found" >&2; exit 77; }
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
# shellcheck source=scripts/bench/agentqd_bench.sh
source scripts/bench/agentqd_bench.sh
bench_init qkunits
# The kernel every one-request job runs the same amount of: the F32 rows kernel of stories260K's
# matmuls (AVX-512 and AVX2 builds name it rows8_float_*).
yardstick=${YARDSTICK:-rows8_float}

run_one() {  # bin_dir label -> one line: label total unit ... (thread=units)
  local bin=$1 label=$2 d="$tmp/$2.$RANDOM"
  bench_start "$bin" "$d"
  local key perf_pid
  key=$(bench_key units)
  node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs 1000 --clients 16 \
    --tag w >/dev/null
  perf record -q -F 1999 -p "$pid" -o "$tmp/perf.data" 2>/dev/null &
  perf_pid=$!
  sleep 0.3
  node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs "$n" --clients 16 \
    >/dev/null
  kill -INT "$perf_pid"
  wait "$perf_pid" 2>/dev/null || true
  bench_stop
  perf report -i "$tmp/perf.data" --no-children --sort comm,sym --stdio 2>/dev/null |
    python3 -c '
import re, sys
label, yard_sym = sys.argv[1], sys.argv[2]
by_thread, yard = {}, 0.0
for line in sys.stdin:
    m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
    if not m:
        continue
    p = float(m.group(1))
    by_thread[m.group(2)] = by_thread.get(m.group(2), 0.0) + p
    if yard_sym in m.group(3):
        yard += p
if yard == 0:
    sys.exit("no samples of the yardstick kernel " + yard_sym)
top = sorted(by_thread.items(), key=lambda kv: -kv[1])[:10]
print(label, "total %.3f" % (100.0 / yard), " ".join("%s=%.3f" % (k, v / yard) for k, v in top))
' "$label" "$yardstick"
}

: >"$tmp/results"
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    if [ $side = A ]; then line=$(run_one "$bin_a" A); else line=$(run_one "$bin_b" B); fi
    echo "round $r: $line (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$tmp/results" >&2
  done
done
python3 - "$tmp/results" <<'PY'
import statistics, sys
runs = {"A": [], "B": []}
for line in open(sys.argv[1]):
    f = line.split()
    side, vals = f[2], {}
    for tok in f[3:]:
        if "=" in tok:
            k, v = tok.split("=")
            vals[k] = float(v)
    vals["total"] = float(f[4])
    runs[side].append(vals)
for side, rs in runs.items():
    keys = sorted({k for r in rs for k in r}, key=lambda k: -statistics.median([r.get(k, 0) for r in rs]))
    print(side, "medians (model kernel units per job mix):",
          " ".join("%s=%.3f" % (k, statistics.median([r.get(k, 0) for r in rs])) for k in keys[:11]))
PY
