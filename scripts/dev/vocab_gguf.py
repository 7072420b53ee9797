#!/usr/bin/env python3
# Writes a vocab-only GGUF (no tensors) from a family's published tokenizer files, as llama.cpp's
# convert_hf_to_gguf.py would write its tokenizer.* keys (#25); run by scripts/dev/llamacpp_vocab.sh.
# Needs numpy and llama.cpp's gguf-py (imported from $LLAMA_CPP_DIR/gguf-py, never copied here).
#
#   vocab_gguf.py qwen2   tokenizer.json tokenizer_config.json OUT.gguf   (Qwen2/2.5/3 byte-level BPE)
#   vocab_gguf.py gemma3  tokenizer.json tokenizer_config.json OUT.gguf   (Gemma 3 SentencePiece BPE)
#   vocab_gguf.py gpt-oss o200k_base.tiktoken OUT.gguf                     (GPT-OSS o200k_harmony)
import base64
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("LLAMA_CPP_DIR", "../llama.cpp"), "gguf-py"))
import gguf  # noqa: E402

T = gguf.TokenType


def looks_special(text):
    # convert_hf_to_gguf.py's does_token_look_special
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def writer(path, name, n_vocab):
    # NOTE: llama.cpp reads hyper-parameters even for a vocab-only load, so the file carries a
    # small llama header as llama.cpp's own models/ggml-vocab-*.gguf do.
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    return w


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def qwen2(tok_json, cfg_json, out):
    # convert_hf_to_gguf.py _set_vocab_gpt2 / get_vocab_base for Qwen2ForCausalLM and Qwen3ForCausalLM:
    # base vocabulary NORMAL, added tokens CONTROL if special (or looking special) else USER_DEFINED,
    # ids up to config.json's vocab_size (151936) padded with UNUSED [PADi]; pre-tokenizer "qwen2".
    t = json.load(open(tok_json, encoding="utf-8"))
    cfg = json.load(open(cfg_json, encoding="utf-8"))
    n_vocab = 151936
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [T.UNUSED] * n_vocab
    for text, i in t["model"]["vocab"].items():
        tokens[i], types[i] = text, T.NORMAL
    for a in t["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = T.CONTROL if a["special"] or looks_special(a["content"]) else T.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in t["model"]["merges"]]
    ids = {a["content"]: a["id"] for a in t["added_tokens"]}
    w = writer(out, "qwen2-vocab (Qwen3 tokenizer)", n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(ids[cfg["eos_token"]])
    w.add_pad_token_id(ids[cfg["pad_token"]])
    w.add_bos_token_id(ids["<|endoftext|>"])  # as llama.cpp's converter sets it for Qwen2 files
    w.add_add_bos_token(False)
    finish(w)


def gemma3(tok_json, cfg_json, out):
    # convert_hf_to_gguf.py _create_vocab_sentencepiece for Gemma3ForCausalLM with tokenizer.model:
    # pieces with their SentencePiece scores and types, then tokenizer_config.json's
    # added_tokens_decoder as CONTROL (special or looking special) or USER_DEFINED with '▁' -> ' ',
    # score -1000; add_space_prefix false.
    # NOTE: the published tokenizer.model (a protobuf) is not what we could obtain; tokenizer.json
    # holds the same pieces in the same order (HF's converter derives its BPE merges from the piece
    # order), and SentencePiece's BPE trainer writes normal pieces in merge order with score = -rank.
    # So a normal piece's score here is -id: llama.cpp's SPM merges by score only through their
    # order, which this keeps (scripts/dev/llamacpp_vocab.sh cross-checks against the HF merges).
    t = json.load(open(tok_json, encoding="utf-8"))
    cfg = json.load(open(cfg_json, encoding="utf-8"))
    vocab = t["model"]["vocab"]
    n_vocab = len(vocab)
    tokens = [b""] * n_vocab
    scores = [0.0] * n_vocab
    types = [T.NORMAL] * n_vocab
    for text, i in vocab.items():
        tokens[i] = text.encode("utf-8")
        if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            types[i] = T.BYTE
        else:
            scores[i] = -float(i)
    for sid, a in cfg["added_tokens_decoder"].items():
        i = int(sid)
        if i >= n_vocab:
            continue  # <image_soft_token> past the text vocabulary, dropped as llama.cpp does
        text = a["content"]
        if a.get("special") or looks_special(text):
            types[i] = T.CONTROL
        else:
            text = text.replace("\u2581", " ")
            types[i] = T.USER_DEFINED
        scores[i] = -1000.0
        tokens[i] = text.encode("utf-8")
    ids = {a["content"]: int(i) for i, a in cfg["added_tokens_decoder"].items()}
    w = writer(out, "gemma3-vocab", n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(ids[cfg["bos_token"]])
    w.add_eos_token_id(ids[cfg["eos_token"]])
    w.add_unk_token_id(ids[cfg["unk_token"]])
    w.add_pad_token_id(ids[cfg["pad_token"]])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    finish(w)


def byte_to_unicode():
    # GPT-2's bytes_to_unicode, as convert_hf_to_gguf.py's _set_vocab_qwen uses it
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_split(ranks, token, max_rank):
    # convert_hf_to_gguf.py QwenModel.bpe: the two parts a tiktoken rank was merged from
    parts = [bytes([b]) for b in token]
    while True:
        best_idx, best_rank = None, None
        for i, pair in enumerate(zip(parts[:-1], parts[1:])):
            rank = ranks.get(pair[0] + pair[1])
            if rank is not None and (best_rank is None or rank < best_rank):
                best_idx, best_rank = i, rank
        if best_rank is None or best_rank >= max_rank:
            break
        parts = parts[:best_idx] + [parts[best_idx] + parts[best_idx + 1]] + parts[best_idx + 2:]
    return parts


def gpt_oss(tiktoken_path, out):
    # GPT-OSS's tokenizer is o200k_harmony: o200k_base's 199998 ranks plus its special tokens
    # (tiktoken's o200k_harmony); merges recovered from the ranks as _set_vocab_qwen does for a
    # tiktoken vocabulary; pre-tokenizer "gpt-4o"; 201088 ids, as in gpt-oss's GGUF files.
    ranks = {}
    for line in open(tiktoken_path, "rb"):
        if line.strip():
            b64, rank = line.split()
            ranks[base64.b64decode(b64)] = int(rank)
    b2u = byte_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)
    n_vocab = 201088
    tokens = [None] * n_vocab
    types = [T.NORMAL] * n_vocab
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        tokens[rank] = enc(token)
        if len(token) > 1:
            parts = bpe_split(ranks, token, rank)
            assert len(parts) == 2, (token, parts)
            merges.append(enc(parts[0]) + " " + enc(parts[1]))
    named = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
             200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>",
             200012: "<|call|>", 200018: "<|endofprompt|>"}
    for i in range(199998, n_vocab):
        tokens[i] = named.get(i, f"<|reserved_{i}|>")
        types[i] = T.CONTROL
    assert all(t is not None for t in tokens)
    w = writer(out, "gpt-oss-vocab (o200k_harmony)", n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(199998)
    w.add_eos_token_id(200002)
    w.add_pad_token_id(199999)
    w.add_add_bos_token(False)
    finish(w)


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "qwen2":
        qwen2(*sys.argv[2:5])
    elif kind == "gemma3":
        gemma3(*sys.argv[2:5])
    elif kind == "gpt-oss":
        gpt_oss(*sys.argv[2:4])
    else:
        sys.exit(f"unknown kind {kind}")
