// Prompt splicing for the next turn of a job: keep the token ids the job's KV already holds
// (as the model sampled them, non-canonical splits included) for as long as their bytes
// spell the new prompt text, and tokenize only the rest (docs/kv_and_batching.md).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace agentq {

struct splice_result {
  std::vector<token_id> tokens;   // the prompt
  int32_t n_kept = 0;             // leading tokens taken from held (0: tok.encode(text) as is)
};

// The prompt for text (tokenized as tok.encode(text, add_special, true) would) given the
// tokens `held` a job's KV holds: the longest prefix of held whose bytes are a byte-prefix
// of text (backed off to a UTF-8 character boundary), then the rest of text encoded as its
// continuation (no BOS; SentencePiece's space prefix only after a special token). Falls back
// to the canonical tokens when no token beyond BOS is kept or when the kept tokens do not
// decode as the canonical tokens of the same bytes do.
splice_result splice_prompt(const tokenizer& tok, std::span<const token_id> held, std::string_view text,
                            bool add_special);

}  // namespace agentq
