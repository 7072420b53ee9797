// Streaming detokenizer (see stream_decoder.h).
#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace agentq {

namespace {

// True when s[pos..] (at least one byte) is the start of a valid UTF-8 sequence cut short by the end
// of s: a lead byte and the continuation bytes Unicode allows after it (no overlong form, surrogate
// or code point past U+10FFFF), fewer than it needs.
bool valid_incomplete(const std::string& s, size_t pos) {
  const auto c0 = static_cast<uint8_t>(s[pos]);
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode Table 3-7)
  if (c0 >= 0xC2 && c0 <= 0xDF) need = 2;
  else if (c0 >= 0xE0 && c0 <= 0xEF) need = 3, lo = c0 == 0xE0 ? 0xA0 : 0x80, hi = c0 == 0xED ? 0x9F : 0xBF;
  else if (c0 >= 0xF0 && c0 <= 0xF4) need = 4, lo = c0 == 0xF0 ? 0x90 : 0x80, hi = c0 == 0xF4 ? 0x8F : 0xBF;
  else return false;
  const size_t have = s.size() - pos;
  if (have >= need) return false;
  for (size_t k = 1; k < have; ++k) {
    const auto c = static_cast<uint8_t>(s[pos + k]);
    if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return false;
  }
  return true;
}

constexpr const char* k_replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string stream_decoder::push(token_id id) {
  pending_ += tok_.token_to_piece(id, special_);
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  while (i < pending_.size()) {
    if (static_cast<uint8_t>(pending_[i]) < 0x80) {
      out += pending_[i++];
      continue;
    }
    const size_t n = unicode::valid_utf8_len(pending_, i);
    if (n > 0) {
      out.append(pending_, i, n);
      i += n;
    } else if (valid_incomplete(pending_, i)) {
      break;  // the rest may still become a character: held back
    } else {
      out += k_replacement;  // a byte no continuation can make valid
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string stream_decoder::flush() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out += k_replacement;  // a character cut short
  pending_.clear();
  return out;
}

}  // namespace agentq
