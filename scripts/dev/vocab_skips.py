#!/usr/bin/env python3
# Lists the corpus texts where a reference tokenizer's semantics differ from the engine's by design
# (scripts/dev/llamacpp_vocab.sh, #25). Prints "case reason" lines.
#   vocab_skips.py CORPUS.inp qwen2|gemma3|gpt-oss upstream|llamacpp [TOKENIZER_DIR]
# upstream (Hugging Face on tokenizer.json, tiktoken for o200k), where llama.cpp and the engine
#   agree otherwise: Hugging Face matches a control token written in the text (llama.cpp with
#   parse_special=false reads it as text) and applies Qwen2's NFC normalizer (llama.cpp does not);
#   tiktoken's o200k regex keeps combining marks (\p{M}) in words and tells non-ASCII upper from lower
#   case, where llama.cpp's rewrite of it (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GPT4O) does neither.
# llamacpp (llama-tokenize): llama.cpp retypes gpt-oss's <|start|> <|channel|> <|message|>
#   <|constrain|> (and <|end|> beside <|return|> and <|call|>) USER_DEFINED at load ("quick hack for
#   gpt-oss" in llama-vocab.cpp), and user-defined tokens match in the text even with
#   parse_special=false; the engine keeps them control tokens, read as text unless parse_special, so
#   Harmony markers in a user's text cannot open a message.
import json
import os
import sys
import unicodedata

corpus, name, ref = sys.argv[1], sys.argv[2], sys.argv[3]
texts = open(corpus, encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
HARMONY_USER_DEFINED = ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"]


def o200k_splits_differ(t):
    # tiktoken's o200k pattern against llama.cpp's lookahead rewrite, with the third-party `regex`
    # module when present; without it, any combining mark or non-ASCII cased letter counts.
    try:
        import regex
    except ImportError:
        return any(unicodedata.category(c).startswith("M") or (ord(c) > 127 and unicodedata.category(c) in ("Lu", "Ll", "Lt"))
                   for c in t)
    tail = r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    up = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" + tail
    contr = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    lc = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + contr + \
         r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + contr + tail
    return [m.group(0) for m in regex.finditer(up, t)] != [m.group(0) for m in regex.finditer(lc, t)]


control = []
if name != "gpt-oss" and ref == "upstream":  # tiktoken's encode_ordinary reads special tokens as text, as llama.cpp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from vocab_gguf import looks_special  # needs gguf-py and numpy
    cfg = json.load(open(os.path.join(sys.argv[4], "tokenizer_config.json"), encoding="utf-8"))
    control = [a["content"] for a in cfg["added_tokens_decoder"].values()
               if a.get("special") or looks_special(a["content"])]
for i, t in enumerate(texts):
    hits = [c for c in control if c in t]
    if ref == "llamacpp":
        marks = [c for c in HARMONY_USER_DEFINED if c in t] if name == "gpt-oss" else []
        if marks:
            print(i, f"llama.cpp retypes {marks[0]} USER_DEFINED at load (llama-vocab.cpp's gpt-oss hack) and matches "
                     "it in the text even with parse_special=false (llama_tokenize from llama.h too); the engine reads "
                     "it as text unless parse_special, so Harmony markers in a user's text cannot open a message")
    elif hits:
        print(i, f"upstream matches the control token {hits[0]} in the text; llama.cpp (parse_special=false) does not")
    elif name == "qwen2" and unicodedata.normalize("NFC", t) != t:
        print(i, "upstream applies Qwen2's NFC normalizer; llama.cpp does not")
    elif name == "gpt-oss" and o200k_splits_differ(t):
        print(i, "tiktoken's o200k regex keeps combining marks in words and non-ASCII case apart; llama.cpp's "
                 "rewrite (LLAMA_VOCAB_PRE_TYPE_GPT4O), which the engine follows, does neither")
