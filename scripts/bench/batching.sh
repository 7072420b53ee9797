#!/usr/bin/env bash
# Decode scaling of the continuous-batching engine: aggregate tokens/s at 1/4/16/64
# concurrent sequences on a 110M-class synthetic Llama (Q8_0, CPU). Ends with one JSON line
# whose "scaling" maps concurrency -> tokens/s ("scaling_cpu_clock": the same per CPU-second x
# threads, for a shared, oversubscribed host).
#   scripts/bench/batching.sh [--quick]      (AGENTQ_BUILD_DIR=build, AGENTQ_BENCH_THREADS=0: all cores,
#                                             AGENTQ_BENCH_MODEL=F: that model instead)
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
build=${AGENTQ_BUILD_DIR:-build}
threads=${AGENTQ_BENCH_THREADS:-0}
if [ ! -x "$build/bin/agentq-bench_sched" ] || [ ! -x "$build/bin/agentq-mkgguf" ]; then
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DAGENTQ_ENGINE_ONLY=ON >&2
  cmake --build "$build" --target agentq-bench_sched agentq-mkgguf >&2
fi
model="${AGENTQ_BENCH_MODEL:-$build/bench-models/110m-q8_0.gguf}"
if [ ! -f "$model" ]; then
  mkdir -p "$(dirname "$model")"
  "$build/bin/agentq-mkgguf" --out "$model" --shape 110m --type q8_0 >&2
fi
gen=32
[ $quick = 1 ] && gen=8
"$build/bin/agentq-bench_sched" scaling --model "$model" --concurrency 1,4,16,64 --gen "$gen" --threads "$threads" | tail -n 1
