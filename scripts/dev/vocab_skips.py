#!/usr/bin/env python3
# Lists the corpus texts where an upstream tokenizer's semantics differ from llama.cpp's by design
# (scripts/dev/llamacpp_vocab.sh, #25): Hugging Face matches a control token written in the text
# (llama.cpp with parse_special=false reads it as text) and applies Qwen2's NFC normalizer (llama.cpp
# does not). Prints "case reason" lines.
#   vocab_skips.py CORPUS.inp qwen2|gemma3|gpt-oss [TOKENIZER_DIR]
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vocab_gguf import looks_special  # noqa: E402

corpus, name = sys.argv[1], sys.argv[2]
texts = open(corpus, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
control = []
if name != "gpt-oss":  # tiktoken's encode_ordinary reads special tokens as text, as llama.cpp
    cfg = json.load(open(os.path.join(sys.argv[3], "tokenizer_config.json"), encoding="utf-8"))
    control = [a["content"] for a in cfg["added_tokens_decoder"].values()
               if a.get("special") or looks_special(a["content"])]
for i, t in enumerate(texts):
    hits = [c for c in control if c in t]
    if hits:
        print(i, f"upstream matches the control token {hits[0]} in the text; llama.cpp (parse_special=false) does not")
    elif name == "qwen2" and unicodedata.normalize("NFC", t) != t:
        print(i, "upstream applies Qwen2's NFC normalizer; llama.cpp does not")
