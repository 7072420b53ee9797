#!/usr/bin/env bash
# CPU engine throughput: pp512 and tg128 tokens/s per synthetic model and weight type,
# with the machine's read bandwidth measured in the same run and decode reported as a
# fraction of its roofline (weight bytes per token / bandwidth).
#   scripts/bench/engine.sh [--quick] [--threads N]
# --quick: 110m models in Q8_0 and Q4_K only (a few minutes on 2 cores).
# Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR (model cache, default /tmp/agentq-bench).
# The last line of stdout is one JSON object with every result.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0
threads=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --threads) threads="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--threads N]" >&2; exit 2 ;;
  esac
  shift
done

build="${AGENTQ_BUILD_DIR:-build}"
cache="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
mkgguf="$build/bin/agentq-mkgguf"
bench="$build/bin/agentq-bench_engine"
for b in "$mkgguf" "$bench"; do
  [ -x "$b" ] || { echo "missing $b (build it: cmake --build $build --target $(basename "$b"))" >&2; exit 1; }
done
mkdir -p "$cache"

if [ $quick = 1 ]; then
  shapes=(110m); types=(q8_0 q4_k); reps=1
else
  shapes=(15m 110m 1b); types=(f32 f16 q8_0 q4_k); reps=2
fi

models=()
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do
    path="$cache/llama-$shape-$type.gguf"
    if [ ! -s "$path" ]; then
      echo "== writing $path" >&2
      "$mkgguf" --out "$path.tmp" --shape "$shape" --type "$type" --threads "$threads" >&2
      mv "$path.tmp" "$path"
    fi
    models+=("$path")
  done
done

echo "== agentq-bench_engine, $threads threads" >&2
"$bench" --threads "$threads" --reps "$reps" "${models[@]}"
