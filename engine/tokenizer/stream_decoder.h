// Streaming detokenizer: turns generated token ids into text one token at a
// time, emitting only complete UTF-8 characters (a byte-fallback or byte-level
// token may carry part of a character).
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace agentq {

class stream_decoder {
 public:
  // tok must outlive the decoder. special: render control tokens as their text.
  explicit stream_decoder(const tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}

  // Feed one token; returns the text that is now complete (often the whole
  // piece, "" while a multi-byte character is still partial). Bytes that can
  // never become valid UTF-8 are passed through, not held.
  std::string push(token_id id);
  // End of stream: returns whatever is still held back (an incomplete character).
  std::string flush();
  void reset() { pending_.clear(); }
  size_t n_pending() const { return pending_.size(); }  // bytes held back

 private:
  const tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace agentq
