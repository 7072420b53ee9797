#!/usr/bin/env bash
# CPU engine throughput: pp512 and tg128 tokens/s per synthetic model and weight type,
# with the machine's read bandwidth measured in the same run and decode reported as a
# fraction of its roofline (weight bytes per token / bandwidth).
#   scripts/bench/engine.sh [--quick] [--threads N] [--shapes 110m,1b] [--types f32,q4_k] [--reps R]
# --quick: 110m models in F16, Q8_0 and Q4_K (a few minutes on 2 cores).
# --shapes/--types/--reps override the set (default 15m,110m,1b x f32,f16,q8_0,q4_k, best of 2);
# models come from scripts/bench/model.sh (written once per shape and type, then reused).
# Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR (model cache, default /tmp/agentq-bench).
# The last line of stdout is one JSON object with every result.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0
threads=$(nproc)
shapes_opt=""
types_opt=""
reps_opt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --threads) threads="$2"; shift ;;
    --shapes) shapes_opt="$2"; shift ;;
    --types) types_opt="$2"; shift ;;
    --reps) reps_opt="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--threads N] [--shapes S,..] [--types T,..] [--reps R]" >&2; exit 2 ;;
  esac
  shift
done

build="${AGENTQ_BUILD_DIR:-build}"
cache="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
bench="$build/bin/agentq-bench_engine"
[ -x "$bench" ] || { echo "missing $bench (build it: cmake --build $build --target $(basename "$bench"))" >&2; exit 1; }

if [ $quick = 1 ]; then
  shapes=(110m); types=(f16 q8_0 q4_k); reps=1
else
  shapes=(15m 110m 1b); types=(f32 f16 q8_0 q4_k); reps=2
fi
[ -n "$shapes_opt" ] && IFS=, read -r -a shapes <<<"$shapes_opt"
[ -n "$types_opt" ] && IFS=, read -r -a types <<<"$types_opt"
[ -n "$reps_opt" ] && reps="$reps_opt"

specs=()
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do specs+=("$shape:$type"); done
done
mapfile -t models < <(AGENTQ_BUILD_DIR="$build" AGENTQ_BENCH_DIR="$cache" AGENTQ_BENCH_THREADS="$threads" \
  scripts/bench/model.sh "${specs[@]}")
[ ${#models[@]} = ${#specs[@]} ] || { echo "engine.sh: could not write every model" >&2; exit 1; }

echo "== agentq-bench_engine, $threads threads" >&2
"$bench" --threads "$threads" --reps "$reps" "${models[@]}"
