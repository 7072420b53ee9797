// Streaming detokenizer (see stream_decoder.h).
#include "tokenizer/stream_decoder.h"

namespace agentq {

namespace {

// Bytes the sequence led by c needs; 0 when c cannot lead one.
size_t utf8_need(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return c >= 0xC2 ? 2 : 0;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return c <= 0xF4 ? 4 : 0;
  return 0;
}

// Offset where an incomplete trailing UTF-8 sequence starts, or s.size() when none.
size_t complete_prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = utf8_need(c);
    return (need > back) ? n - back : n;
  }
  return n;
}

}  // namespace

std::string stream_decoder::push(token_id id) {
  pending_ += tok_.token_to_piece(id, special_);
  const size_t cut = complete_prefix(pending_);
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string stream_decoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace agentq
