#!/usr/bin/env bash
# Constrained-decoding mask cost per decode step on the 32k llama-spm vocabulary.
# usage: scripts/bench/grammar.sh [--quick] [--walks N]
#   (BUILD_DIR, default build-bench: uses $BUILD_DIR/bin/agentq-bench_grammar, building it only
#    when missing; AGENTQ_SHARED_DIR, default ../shared)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-bench}
if [ ! -x "$BUILD/bin/agentq-bench_grammar" ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DAGENTQ_ENGINE_ONLY=ON -DAGENTQ_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$BUILD" --target agentq-bench_grammar -j"${JOBS:-2}" >/dev/null
fi
"$BUILD/bin/agentq-bench_grammar" --vocab "${AGENTQ_SHARED_DIR:-../shared}/models/vocab/ggml-vocab-llama-spm.gguf" "$@"
