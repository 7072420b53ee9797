#!/usr/bin/env bash
# Regenerates tests/data/presets: a synthetic F32 model (agentq-mkgguf --shape presets, n_embd 64:
# not a multiple of 256, so the presets' real fallbacks appear) quantized by llama.cpp's own
# llama-quantize to each common preset, and llama.cpp's greedy ids + top-5 logits on each file.
#   LLAMA_CPP_BUILD  a llama.cpp build holding libllama (see llamacpp_ref.sh)
#   AGENTQ_BIN_DIR   where agentq-mkgguf is (default build/bin)
# Output: tests/data/presets/{<PRESET>.gguf, reference.jsonl, SHA256SUMS}. Run from the checkout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${LLAMA_CPP_BUILD:?set LLAMA_CPP_BUILD to a llama.cpp build directory}
bin=${AGENTQ_BIN_DIR:-$root/build/bin}
out=$root/tests/data/presets
# NOTE: llamacpp_quantize calls llama_model_quantize with its default parameters, as llama-quantize
# does without flags (no imatrix), but needs no build of llama.cpp's common library.
quantize=$(LLAMA_CPP_BUILD=$build "$here/llamacpp_ref.sh" llamacpp_quantize)
ref=$(LLAMA_CPP_BUILD=$build "$here/llamacpp_ref.sh")
# preset name : llama.h's LLAMA_FTYPE_MOSTLY_<name>
presets="Q2_K:10 Q3_K_S:11 Q3_K_M:12 Q3_K_L:13 Q4_0:2 Q4_1:3 Q4_K_S:14 Q4_K_M:15 Q5_0:8 Q5_1:9 Q5_K_S:16 Q5_K_M:17
         Q6_K:18 Q8_0:7 IQ4_NL:25 IQ4_XS:30"
# NOTE: sigma 0.3 (not mkgguf's 0.02) so the tiny model's logits spread over several units and
# greedy output varies from step to step instead of repeating one token.
mkgguf_args=(--shape presets --type f32 --vocab "${AGENTQ_SHARED_DIR:-$root/../shared}/models/stories260K.gguf"
             --sigma 0.3 --seed 26 --threads 1)
prompts=(--ids 1,403,407,261,378 --ids 1,20,30,40,50,60 --ids 1,300,301,302)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/agentq-mkgguf" --out "$tmp/f32.gguf" "${mkgguf_args[@]}"
rm -f "$out"/*.gguf "$out/reference.jsonl"
mkdir -p "$out"
for pf in $presets; do
  p=${pf%%:*}
  "$quantize" "$tmp/f32.gguf" "$out/$p.gguf" "${pf##*:}" 1 > "$tmp/$p.log" 2>&1 || { cat "$tmp/$p.log" >&2; exit 1; }
  "$ref" --model "$out/$p.gguf" "${prompts[@]}" -n 32 --threads 1 2> "$tmp/$p.ref.log" |
    python3 -c 'import io,json,sys
for l in io.TextIOWrapper(sys.stdin.buffer, errors="replace"):
    j = json.loads(l); j.pop("output_text", None); j.pop("prompt", None)
    print(json.dumps({"preset": sys.argv[1], **j}, separators=(",", ":")))' "$p" >> "$out/reference.jsonl"
done
{
  echo "# made by scripts/dev/presets.sh: agentq-mkgguf --out f32.gguf ${mkgguf_args[*]}"
  echo "# then: llamacpp_quantize f32.gguf <PRESET>.gguf <LLAMA_FTYPE_MOSTLY_PRESET> 1 (= llama-quantize f32.gguf <PRESET>.gguf <PRESET> 1) (llama.cpp $(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || echo unknown))"
  (cd "$out" && sha256sum ./*.gguf reference.jsonl)
} > "$out/SHA256SUMS"
du -ch "$out"/*.gguf | tail -1
