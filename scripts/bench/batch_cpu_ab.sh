#!/usr/bin/env bash
# Paired A/B of agentqd's CPU per Batch-API job end to end (issue 29, docs/queue_perf.md): for each
# round, binary A then binary B (each a fresh all-in-one agentqd with its embedded redis, WAL +
# synchronous=FULL + AOF everysec as always): a 200-line warm-up batch, then an N-line batch
# (1-token chat completions sharing a system prompt: scripts/bench/batch_accept.py) uploaded and run
# to completed; agentqd's CPU-s per 1,000 lines from upload to completed, jobs/s and the 1-min load.
# With PERF=1 also a perf record -g of side B's timed batch (perf report printed: top self symbols);
# with THREADS=1 each run's CPU-s per 1,000 timed lines by thread name, and the seconds runnable but
# waiting for a CPU (batch_stages.py's schedstat window over agentqd's threads, stderr).
# Each run's line also gives the engine's prompt tokens computed and cached per timed line (from
# /metrics, read before and after the timed batch, outside its CPU window).
#   scripts/bench/batch_cpu_ab.sh BIN_DIR_A BIN_DIR_B [LINES] [ROUNDS]   (default 3000, 3)
# ARGS_A / ARGS_B: extra agentqd flags per side. Prints one line per run and one JSON line: medians
# and the paired ratios B/A.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin_a=$1
bin_b=$2
n_lines=${3:-3000}
rounds=${4:-3}
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
source scripts/bench/agentqd_bench.sh
bench_init bcpu

# The engine's prompt-token counters: "computed cached" (the worker's sampler writes them about
# every second, so wait for one more sample first).
prompt_tokens() {
  sleep 1.5
  curl -fsS "$url/metrics" | awk '/^agentq_prompt_tokens_computed_total/ {c += $NF} /^agentq_prompt_tokens_cached_total/ {k += $NF} END {print c + 0, k + 0}'
}

run_one() {  # bin_dir label extra_args -> prints "label cpu_per_1000 jobs_per_s load computed_per_line cached_per_line"
  local bin=$1 label=$2 d="$tmp/$2.$RANDOM"
  local -a extra_args
  read -r -a extra_args <<<"$3"
  bench_start "$bin" "$d" "${extra_args[@]}"
  local key
  key=$(bench_key cpu)
  python3 scripts/bench/batch_accept.py --url "$url" --key "$key" --lines 200 --pid "$pid" --wait >/dev/null
  local load perf_pid="" out tok0 tok1
  tok0=$(prompt_tokens)
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ "${PERF:-0}" = 1 ] && [ "$label" = B ]; then
    perf record -g -p "$pid" -o "$tmp/perf.data" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
  fi
  local stages_pid=""
  if [ "${THREADS:-0}" = 1 ]; then  # batch_stages.py's per-thread schedstat window over the timed batch
    python3 scripts/bench/batch_stages.py --pid "$pid" --interval 0.1 --seconds 600 >"$tmp/stages.json" 2>/dev/null &
    stages_pid=$!
  fi
  out=$(python3 scripts/bench/batch_accept.py --url "$url" --key "$key" --lines "$n_lines" --pid "$pid" --wait | tail -n 1)
  if [ -n "$stages_pid" ]; then
    kill -INT "$stages_pid"; wait "$stages_pid" || true
    python3 - "$label" "$n_lines" "$tmp/stages.json" <<'PY' >&2
import json, sys
label, n, t = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))["threads"]
print(f"{label}: CPU-s per 1,000 lines by thread (+ s runnable waiting for a CPU): " + "  ".join(
    f"{k} {1000 * v['run_s'] / n:.4f} (+{1000 * v['wait_s'] / n:.4f})" for k, v in t.items() if v["run_s"] * 1000 / n > 0.0005))
PY
  fi
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    perf report -i "$tmp/perf.data" --no-children -g none --sort dso,sym --percent-limit 0.7 --stdio 2>/dev/null |
      grep '%' | cut -c1-150 | head -40 >&2
    perf report -i "$tmp/perf.data" --no-children -g none --sort comm --stdio 2>/dev/null | grep '%' | head -15 >&2
    [ -n "${PERF_OUT:-}" ] && cp "$tmp/perf.data" "$PERF_OUT"
  fi
  tok1=$(prompt_tokens)
  bench_stop
  python3 - "$label" "$load" "$n_lines" "$out" "$tok0" "$tok1" <<'PY'
import json, sys
label, load, n, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
t0, t1 = [float(x) for x in sys.argv[5].split()], [float(x) for x in sys.argv[6].split()]
assert d.get("batch_final") == "completed", d
print(label, round(1000 * d["end_to_end_cpu_s"] / n, 3), d["end_to_end_jobs_per_s"], load,
      round((t1[0] - t0[0]) / n, 1), round((t1[1] - t0[1]) / n, 1))
PY
}

bench_ab_rounds "$rounds"
python3 - "$tmp/results" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
a = [float(r[3]) for r in rows if r[2] == "A"]
b = [float(r[3]) for r in rows if r[2] == "B"]
ja = [float(r[4]) for r in rows if r[2] == "A"]
jb = [float(r[4]) for r in rows if r[2] == "B"]
ta = [r[6:8] for r in rows if r[2] == "A"]
tb = [r[6:8] for r in rows if r[2] == "B"]
print(json.dumps({"cpu_s_per_1000_A": a, "cpu_s_per_1000_B": b, "median_A": statistics.median(a),
                  "median_B": statistics.median(b), "paired_ratio_B_over_A": [round(y / x, 3) for x, y in zip(a, b)],
                  "jobs_per_s_A": ja, "jobs_per_s_B": jb, "load_1min": [float(r[5]) for r in rows],
                  "prompt_tokens_computed_cached_per_line_A": ta, "prompt_tokens_computed_cached_per_line_B": tb}))
PY
