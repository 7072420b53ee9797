#!/usr/bin/env bash
# Build scripts/dev/llamacpp_ref.cpp against a llama.cpp CPU build that lives OUTSIDE this
# repository (never vendored):
#   LLAMA_CPP_DIR  llama.cpp source tree with a build in $LLAMA_CPP_DIR/build (default ../llama.cpp)
# Build llama.cpp first, e.g.:
#   cmake -S $LLAMA_CPP_DIR -B $LLAMA_CPP_DIR/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF -DLLAMA_CURL=OFF
#   cmake --build $LLAMA_CPP_DIR/build --target llama llama-quantize llama-bench
# Prints the path of the built binary (in $LLAMA_CPP_DIR/build/bin/llamacpp_ref).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llama=${LLAMA_CPP_DIR:-$here/../../../llama.cpp}
llama=$(cd "$llama" && pwd)
lib_dir=$(dirname "$(find "$llama/build" -name 'libllama.so' -o -name 'libllama.a' | head -1)")
[ -n "$lib_dir" ] || { echo "llamacpp_ref.sh: no libllama in $llama/build (build llama.cpp first)" >&2; exit 1; }
out=$llama/build/bin/llamacpp_ref
mkdir -p "$(dirname "$out")"
ggml_libs=$(find "$llama/build" -name 'libggml*.so' -printf '%h\n' | sort -u | sed 's/^/-L/' | tr '\n' ' ')
# shellcheck disable=SC2086
g++ -O2 -std=c++17 "$here/llamacpp_ref.cpp" -I"$llama/include" -I"$llama/ggml/include" \
  -L"$lib_dir" $ggml_libs -lllama -lggml -lggml-base -lggml-cpu \
  -Wl,-rpath,"$lib_dir" $(echo "$ggml_libs" | sed 's/-L/-Wl,-rpath,/g') -o "$out"
echo "$out"
