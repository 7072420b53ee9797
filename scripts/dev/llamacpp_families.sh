#!/usr/bin/env bash
# Regenerates tests/unit/engine/data/families/<arch>.jsonl, the llama.cpp reference of
# tests/unit/engine/model_families.cpp: for each architecture, agentq-mkgguf writes the tiny
# parity model (--shape parity, F32, seed 25: keep in step with k_seed in the test) and
# llamacpp_ref (scripts/dev/llamacpp_ref.sh, llama.cpp's CPU backend, built outside this
# repository) decodes three fixed prompts greedily for 32 tokens. Only the JSON is committed.
#   AGENTQ_BUILD_DIR  a build with agentq-mkgguf (default: build-engine, else build)
#   LLAMACPP_REF      a built llamacpp_ref binary (default: built by llamacpp_ref.sh)
#   LLAMA_CPP_DIR     passed to llamacpp_ref.sh (default ../llama.cpp beside the checkout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${AGENTQ_BUILD_DIR:-$repo/build-engine}
[ -x "$build/bin/agentq-mkgguf" ] || build=$repo/build
mkgguf=$build/bin/agentq-mkgguf
[ -x "$mkgguf" ] || { echo "llamacpp_families.sh: build agentq-mkgguf first" >&2; exit 1; }
ref=${LLAMACPP_REF:-$("$here/llamacpp_ref.sh")}
shared=${AGENTQ_SHARED_DIR:-$repo/../shared}
vocab=$shared/models/vocab/ggml-vocab-llama-spm.gguf
out=$repo/tests/unit/engine/data/families
seed=25
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
# A short prompt, a middling one, and one longer than the sliding windows (8) of the gemma and gpt-oss parity shapes.
short="1,450,4996,1068,338"
mid="1,15043,29892,590,1024,338,263,11148,29889"
long="1,306,4966,263,1243,310,8637,322,10200,29892,1497,278,6958,29889,450,1095,338,3802,29892,541,29871"
for arch in llama qwen2 qwen3 qwen3moe smollm3 gemma2 gemma3 phi3 gpt-oss; do
  "$mkgguf" --out "$tmp/$arch.gguf" --shape parity --type f32 --seed "$seed" --arch "$arch" --vocab "$vocab" \
    --threads 2 >/dev/null
  "$ref" --model "$tmp/$arch.gguf" --ids "$short" --ids "$mid" --ids "$long" -n 32 --threads 2 --ctx 512 > "$out/$arch.jsonl"
  echo "llamacpp_families.sh: $arch -> $out/$arch.jsonl"
done
