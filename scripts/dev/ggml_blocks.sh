#!/usr/bin/env bash
# Regenerates tests/unit/engine/data/ggml_blocks.bin from llama.cpp's ggml (a CPU build of
# llama.cpp outside this repository; LLAMA_CPP=/path/to/llama.cpp, its build directory
# LLAMA_BUILD (default: $LLAMA_CPP/build; only the ggml-base target is needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
llama=${LLAMA_CPP:-/work/llama.cpp}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
lib=$(dirname "$(find "${LLAMA_BUILD:-$llama/build}" -name 'libggml-base.so' | head -1)")
cc -O2 -o "$out/ggml_blocks" scripts/dev/ggml_blocks.c -I"$llama/ggml/include" -L"$lib" -lggml-base -lm \
  -Wl,-rpath,"$lib"
"$out/ggml_blocks" tests/unit/engine/data/ggml_blocks.bin
sha256sum tests/unit/engine/data/ggml_blocks.bin
