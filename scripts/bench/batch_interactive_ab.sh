#!/usr/bin/env bash
# Paired A/B of an interactive job's latency during a Batch file, beside the batch's own jobs/s
# (issue 29; docs/queue_perf.md session 24): for each round, binary A then binary B (a fresh
# all-in-one agentqd each, durability as always), a 200-line warm-up batch, then an N-line batch
# with one-request normal-priority jobs of another tenant submitted one at a time while it runs
# (scripts/bench/interactive_during_batch.py). Prints one line per run (label, interactive
# submit-to-end p50 / p90 ms, submit-to-claim p50 ms, jobs run during the batch, batch jobs/s,
# 1-min load) and one JSON line of medians.
#   scripts/bench/batch_interactive_ab.sh BIN_DIR_A BIN_DIR_B [LINES] [ROUNDS] [JOBS]   (20000, 3, 40)
# ARGS_A / ARGS_B: extra agentqd flags per side.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin_a=$1
bin_b=$2
n_lines=${3:-20000}
rounds=${4:-3}
n_jobs=${5:-40}
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
source scripts/bench/agentqd_bench.sh
bench_init bint

run_one() {  # bin_dir label extra_args
  local bin=$1 label=$2 d="$tmp/$2.$RANDOM"
  local -a extra_args
  read -r -a extra_args <<<"$3"
  bench_start "$bin" "$d" "${extra_args[@]}"
  local bulk inter load out
  bulk=$(bench_key bulk)
  inter=$(bench_key inter)
  python3 scripts/bench/batch_accept.py --url "$url" --key "$bulk" --lines 200 --pid "$pid" --wait >/dev/null
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$(python3 scripts/bench/interactive_during_batch.py --url "$url" --key "$bulk" --interactive-key "$inter" \
    --lines "$n_lines" --jobs "$n_jobs" | tail -n 1)
  bench_stop
  python3 - "$label" "$load" "$out" <<'PY'
import json, sys
label, load, d = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
assert d.get("batch_final") == "completed", d
print(label, d.get("total_ms_p50"), d.get("total_ms_p90"), d.get("queue_ms_p50"), d["interactive_during_batch"],
      d["batch_jobs_per_s"], load)
PY
}

bench_ab_rounds "$rounds"
python3 - "$tmp/results" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def col(side, i):
    return [float(r[i]) for r in rows if r[2] == side and r[i] != "None"]
out = {}
for side in "AB":
    for name, i in (("p50_ms", 3), ("p90_ms", 4), ("queue_p50_ms", 5), ("batch_jobs_per_s", 7)):
        v = col(side, i)
        out[f"{name}_{side}"] = v
        out[f"median_{name}_{side}"] = statistics.median(v) if v else None
out["load_1min"] = [float(r[8]) for r in rows]
print(json.dumps(out))
PY
