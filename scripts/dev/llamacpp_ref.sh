#!/usr/bin/env bash
# Build scripts/dev/llamacpp_ref.cpp against a llama.cpp CPU build that lives OUTSIDE this
# repository (never vendored):
#   LLAMA_CPP_DIR    llama.cpp source tree (default ../llama.cpp beside the checkout)
#   LLAMA_CPP_BUILD  its build directory (default: the first $LLAMA_CPP_DIR/build* holding libllama)
# Build llama.cpp first, e.g.:
#   cmake -S $LLAMA_CPP_DIR -B $LLAMA_CPP_DIR/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_HTML=OFF -DLLAMA_CURL=OFF
#   cmake --build $LLAMA_CPP_DIR/build --target llama llama-quantize llama-bench
# Prints the path of the built binary (in $LLAMA_CPP_DIR/build/bin/llamacpp_ref). With the argument
# llamacpp_quantize it builds scripts/dev/llamacpp_quantize.cpp instead (llama_model_quantize).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llama=${LLAMA_CPP_DIR:-$here/../../../llama.cpp}
llama=$(cd "$llama" && pwd)
lib=$(find "${LLAMA_CPP_BUILD:-$llama}" -path '*/build*' \( -name 'libllama.so' -o -name 'libllama.a' \) 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "llamacpp_ref.sh: no libllama under ${LLAMA_CPP_BUILD:-$llama/build*} (build llama.cpp first)" >&2; exit 1; }
lib_dir=$(dirname "$lib")
build=${LLAMA_CPP_BUILD:-$(dirname "$lib_dir")}
prog=${1:-llamacpp_ref}
case $prog in llamacpp_ref|llamacpp_quantize) ;; *) echo "llamacpp_ref.sh: unknown program $prog" >&2; exit 2;; esac
out=$build/bin/$prog
mkdir -p "$(dirname "$out")"
ggml_libs=$(find "$build" -name 'libggml*.so' -printf '%h\n' | sort -u | sed 's/^/-L/' | tr '\n' ' ')
# shellcheck disable=SC2086
g++ -O2 -std=c++17 "$here/$prog.cpp" -I"$llama/include" -I"$llama/ggml/include" \
  -L"$lib_dir" $ggml_libs -lllama -lggml -lggml-base -lggml-cpu \
  -Wl,-rpath,"$lib_dir" $(echo "$ggml_libs" | sed 's/-L/-Wl,-rpath,/g') -o "$out"
echo "$out"
