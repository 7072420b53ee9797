// Streaming detokenizer: turns generated token ids into text one token at a
// time, emitting only complete UTF-8 characters (a byte-fallback or byte-level
// token may carry part of a character). Its text is always valid UTF-8: a byte
// that cannot become part of a character (a lone continuation byte, an invalid
// lead, an overlong or surrogate form) and, at flush(), each byte of a character
// cut short, become U+FFFD, as `agentq-engine generate` prints them.
// NOTE: why: the service stores and sends this text as JSON strings, which must
// be valid UTF-8; a 1-token turn on a byte-fallback vocabulary (a random 1B model's
// <0xB5>) failed its job with "invalid UTF-8 byte" (session 28). The token ids
// (output_ids) stay exact.
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
  // never become valid UTF-8 come out at once as U+FFFD, not held.
  std::string push(token_id id);
  // End of stream: U+FFFD for each byte still held back (a character cut short).
  std::string flush();
  void reset() { pending_.clear(); }
  size_t n_pending() const { return pending_.size(); }  // bytes held back

 private:
  const tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace agentq
