#!/usr/bin/env bash
# Paired A/B of two builds' speculative decoding (issue 32, docs/speculative.md): for each round,
# agentq-bench_spec from BIN_DIR_A then BIN_DIR_B (B first on even rounds), same model and
# arguments, each one JSON line per (workload, batch); prints a line per run with the 1-min load,
# then one JSON line per (workload, batch): medians of ratio, ratio_paired, ratio_cpu_all and of
# the on / off rates for each build. Each run first waits for a quiet window (wait_quiet).
#   scripts/bench/spec_ab.sh BIN_DIR_A BIN_DIR_B ROUNDS -- BENCH_SPEC_ARGS...
# e.g. scripts/bench/spec_ab.sh /work/main/build/bin build/bin 4 -- --model M --batch 1 --gen 300
#      --reps 5 --tool 300 --text engine/spec/ngram_proposer.cpp --workloads repetitive
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 4 ] && [ "$4" = "--" ] || { echo "usage: $0 BIN_DIR_A BIN_DIR_B ROUNDS -- BENCH_SPEC_ARGS..." >&2; exit 2; }
bin_a=$1 bin_b=$2 rounds=$3
shift 4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Before each run, wait (up to 120 s) for a 3 s window with the CPUs >= 87% idle (a shared host:
# other tenants' builds move one run's ratio by more than the change measured); QUIET=0: don't.
wait_quiet() {
  [ "${QUIET:-1}" = 1 ] || return 0
  local i a b
  for ((i = 0; i < 40; i++)); do
    a=($(head -1 /proc/stat)); sleep 3; b=($(head -1 /proc/stat))
    local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 k
    for k in 1 2 3 4 5 6 7 8; do total=$((total + b[k] - a[k])); done
    ((total > 0 && idle * 100 >= 87 * total)) && return 0
  done
  echo "# no quiet window in 120 s (load $(cut -d' ' -f1 /proc/loadavg)); running anyway" >&2
}
run() {  # label bin_dir bench_spec_args...
  local label=$1 bin=$2 load
  shift 2
  wait_quiet
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$bin/agentq-bench_spec" "$@" 2>/dev/null | grep '^{' | sed "s/^{/{\"build\":\"$label\",\"load\":$load,/" | tee -a "$out"
}
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    run A "$bin_a" "$@"; run B "$bin_b" "$@"
  else
    run B "$bin_b" "$@"; run A "$bin_a" "$@"
  fi
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = sorted({(r["workload"], r["batch"]) for r in rows})
for w, b in keys:
    res = {"bench": "spec_ab", "workload": w, "batch": b}
    for side in ("A", "B"):
        rs = [r for r in rows if r["build"] == side and r["workload"] == w and r["batch"] == b]
        for f in ("ratio", "ratio_paired", "ratio_cpu_all", "tok_per_s_spec", "tok_per_s_base",
                  "tok_per_cpu_s_spec", "tok_per_cpu_s_base"):
            res[f"{f}_{side}"] = round(statistics.median(r[f] for r in rs), 3)
        res[f"loads_{side}"] = [r["load"] for r in rs]
    print(json.dumps(res))
PY
