// GGUF vocabulary → decoded pieces (see vocab_pieces.h).
#include "grammar/vocab_pieces.h"

#include "gguf/reader.h"

namespace agentq::grammar {

namespace {

int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string decode_spm(std::string_view p) {
  if (p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>' && hex_val(p[3]) >= 0 && hex_val(p[4]) >= 0)
    return std::string(1, static_cast<char>(hex_val(p[3]) * 16 + hex_val(p[4])));
  std::string out;
  for (size_t i = 0; i < p.size(); i++) {
    if (p.substr(i, 3) == "\xE2\x96\x81") {
      out.push_back(' ');
      i += 2;
    } else {
      out.push_back(p[i]);
    }
  }
  return out;
}

// GPT-2 byte-level: code points 256.. map back to bytes 0..255 (bytes_to_unicode).
std::string decode_bpe(std::string_view p) {
  static int table[512];
  static bool init = false;
  if (!init) {
    for (int& x : table) x = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
      bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      if (direct) table[b] = b;
      else table[256 + n++] = b;
    }
    init = true;
  }
  std::string out;
  for (size_t i = 0; i < p.size();) {
    unsigned char c = p[i];
    uint32_t cp;
    size_t len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c & 0xE0) == 0xC0 && i + 1 < p.size()) { cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F); len = 2; }
    else { out.push_back(static_cast<char>(c)); i++; continue; }
    if (cp < 512 && table[cp] >= 0) out.push_back(static_cast<char>(table[cp]));
    else out.append(p.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace

bool load_gguf_vocab(const std::string& path, gguf_vocab* out, std::string* error) {
  auto f = gguf::file::open(path, error);
  if (!f) return false;
  const gguf::value* toks = f->find("tokenizer.ggml.tokens");
  if (!toks || !toks->is_array() || toks->elem_type != gguf::value_type::string) {
    if (error) *error = path + ": no tokenizer.ggml.tokens";
    return false;
  }
  const gguf::value* types = f->find("tokenizer.ggml.token_type");
  bool bpe = f->get_string("tokenizer.ggml.model").value_or("llama") == "gpt2";
  out->pieces.clear();
  out->pieces.reserve(toks->strs.size());
  for (size_t i = 0; i < toks->strs.size(); i++) {
    int64_t type = types && types->is_array() && i < types->n ? types->at_i64(i) : 1;
    if (type == 3 || type == 5 || type == 2) {   // control, unused, unknown
      out->pieces.emplace_back();
      continue;
    }
    out->pieces.push_back(bpe ? decode_bpe(toks->strs[i]) : decode_spm(toks->strs[i]));
  }
  out->eos_ids.clear();
  if (auto e = f->get_int("tokenizer.ggml.eos_token_id")) out->eos_ids.push_back(static_cast<token_id>(*e));
  if (auto e = f->get_int("tokenizer.ggml.eot_token_id")) out->eos_ids.push_back(static_cast<token_id>(*e));
  return true;
}

}  // namespace agentq::grammar
