#!/usr/bin/env bash
# Host-side sampling cost per token (greedy, temperature, top-p, top-k) at 32k and 128k
# vocabularies, against one pass over the row and a full sort of it in the same run.
# usage: scripts/bench/sampler.sh [--quick] [agentq-bench_sampler flags]
#   (BUILD_DIR, default build-bench: uses $BUILD_DIR/bin/agentq-bench_sampler, building it only
#    when missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-bench}
args=()
for a in "$@"; do
  if [ "$a" = --quick ]; then args+=(--iters 20); else args+=("$a"); fi
done
if [ ! -x "$BUILD/bin/agentq-bench_sampler" ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DAGENTQ_ENGINE_ONLY=ON -DAGENTQ_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" --target agentq-bench_sampler -j"${JOBS:-2}" >/dev/null
fi
"$BUILD/bin/agentq-bench_sampler" "${args[@]}"
