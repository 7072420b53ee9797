#!/usr/bin/env bash
# Kernel roofline: decode matvec GB/s per weight type (4096x4096, 1 and 2 threads) as a
# fraction of the measured read bandwidth, and the prefill (batch 64) speedup per token.
# Ends with one JSON line. Extra arguments go to agentq-bench_kernels (--types, --clock wall, ...).
#   scripts/bench/bandwidth.sh [--threads N] [...]   (AGENTQ_BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${AGENTQ_BUILD_DIR:-build}
if [ ! -x "$build/bin/agentq-bench_kernels" ]; then
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DAGENTQ_ENGINE_ONLY=ON >&2
  cmake --build "$build" --target agentq-bench_kernels >&2
fi
"$build/bin/agentq-bench_kernels" "$@"
