// Byte-level BPE encoding (tokenizer.ggml.model = "gpt2"): pre-tokenizer split,
// then per word the lowest-rank merge first over byte symbols, as llama.cpp does.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace agentq {

namespace {

struct bpe_symbol {
  int32_t prev;
  int32_t next;
  token_id id;  // -1: a byte the vocabulary lacks (never merges, dropped on output)
  bool alive;
};

struct bpe_bigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  token_id left_id;   // ids when queued: a changed symbol makes the entry stale
  token_id right_id;
  token_id result;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct bpe_order {
  bool operator()(const bpe_bigram& a, const bpe_bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void tokenizer::encode_bpe(std::string_view text, std::vector<token_id>* out) const {
  std::vector<byte_span> words;
  pre_split(pre_, text, &words);
  for (const byte_span& w : words) encode_bpe_word(text.substr(w.begin, w.end - w.begin), out);
}

void tokenizer::encode_bpe_word(std::string_view word, std::vector<token_id>* out) const {
  if (ignore_merges_) {  // Llama 3: a word that is itself a token is taken whole
    std::string encoded;
    encoded.reserve(word.size() * 2);
    for (char c : word) unicode::append_utf8(encoded, unicode::byte_to_cpt(static_cast<uint8_t>(c)));
    const token_id id = find_token(encoded);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (word.size() == 1) {
    const token_id id = byte_tokens_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }

  std::vector<bpe_symbol> symbols(word.size());
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {i - 1, i + 1 == n ? -1 : i + 1, byte_tokens_[static_cast<uint8_t>(word[i])], true};
  }
  std::vector<bpe_bigram> storage;
  storage.reserve(word.size());
  bool heap_built = false;  // the first pairs are heapified at once
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const token_id a = symbols[left].id, b = symbols[right].id;
    if (a < 0 || b < 0) return;
    const merge_index::merge* m = merges_.find(a, b);
    if (!m) return;
    storage.push_back({left, right, m->rank, a, b, m->result});
    if (heap_built) std::push_heap(storage.begin(), storage.end(), bpe_order{});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
  std::make_heap(storage.begin(), storage.end(), bpe_order{});
  heap_built = true;

  while (!storage.empty()) {
    std::pop_heap(storage.begin(), storage.end(), bpe_order{});
    const bpe_bigram bg = storage.back();
    storage.pop_back();
    bpe_symbol& l = symbols[bg.left];
    bpe_symbol& r = symbols[bg.right];
    if (!l.alive || !r.alive || l.next != bg.right || l.id != bg.left_id || r.id != bg.right_id) continue;
    l.id = bg.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    if (symbols[i].id >= 0) out->push_back(symbols[i].id);
  }
}

}  // namespace agentq
