// SentencePiece-style encoding (tokenizer.ggml.model = "llama"): llama.cpp's
// score-driven bigram merging over UTF-8 characters, with <0xXX> byte fallback.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace agentq {

namespace {

struct spm_symbol {
  int32_t prev;
  int32_t next;
  uint32_t begin;  // byte offset into the escaped text
  uint32_t n;      // bytes; 0 once merged into its left neighbour
};

struct spm_bigram {
  int32_t left;
  int32_t right;
  float score;
  uint32_t size;  // bytes of the merged text when queued (detects stale entries)
};

// Highest score first; among equal scores the leftmost pair.
struct spm_order {
  bool operator()(const spm_bigram& a, const spm_bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void tokenizer::push_byte_spm(uint8_t byte, std::vector<token_id>* out) const {
  if (byte_tokens_[byte] >= 0) out->push_back(byte_tokens_[byte]);
  else if (unk_ >= 0) out->push_back(unk_);
}

// text: already escaped ('▁' for spaces, prefix added).
void tokenizer::encode_spm(std::string_view text, std::vector<token_id>* out) const {
  constexpr std::string_view marker = "\xE2\x96\x81";
  if (!spm_split_words_) {
    encode_spm_word(text, out);
    return;
  }
  // Cut before each '▁' that follows another character (see spm_split_words_).
  size_t begin = 0;
  for (size_t at = text.find(marker, 1); at != std::string_view::npos; at = text.find(marker, at + marker.size())) {
    if (at >= marker.size() && text.compare(at - marker.size(), marker.size(), marker) == 0) continue;
    encode_spm_word(text.substr(begin, at - begin), out);
    begin = at;
  }
  encode_spm_word(text.substr(begin), out);
}

// NOTE: symbol offsets are 32-bit; a longer run is cut on a character boundary first.
void tokenizer::encode_spm_word(std::string_view text, std::vector<token_id>* out) const {
  constexpr size_t k_max_chunk = size_t(1) << 31;
  if (text.size() > k_max_chunk) {
    size_t cut = k_max_chunk;
    while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
    encode_spm_word(text.substr(0, cut), out);
    encode_spm_word(text.substr(cut), out);
    return;
  }
  std::vector<spm_symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = unicode::valid_utf8_len(text, pos);
    if (len == 0) len = 1;  // an invalid byte stands alone (and falls back to its byte token)
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back({idx - 1, pos + len == text.size() ? -1 : idx + 1, static_cast<uint32_t>(pos),
                       static_cast<uint32_t>(len)});
    pos += len;
  }
  if (symbols.empty()) return;

  std::vector<spm_bigram> storage;
  storage.reserve(symbols.size());
  bool heap_built = false;  // the first pairs are heapified at once
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].n + symbols[right].n;
    const token_id id = find_token(text.substr(symbols[left].begin, size));
    if (id < 0) return;
    storage.push_back({left, right, scores_[id], size});
    if (heap_built) std::push_heap(storage.begin(), storage.end(), spm_order{});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);
  std::make_heap(storage.begin(), storage.end(), spm_order{});
  heap_built = true;

  while (!storage.empty()) {
    std::pop_heap(storage.begin(), storage.end(), spm_order{});
    const spm_bigram b = storage.back();
    storage.pop_back();
    spm_symbol& l = symbols[b.left];
    spm_symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].n);
    const token_id id = find_token(piece);
    if (id >= 0) {
      out->push_back(id);
    } else {
      for (char c : piece) push_byte_spm(static_cast<uint8_t>(c), out);
    }
  }
}

}  // namespace agentq
