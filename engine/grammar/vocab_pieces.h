// Decoded token pieces straight from a GGUF vocabulary, for the grammar tests,
// the benchmark and fuzzing while no tokenizer is at hand: SentencePiece pieces
// ("▁" → space, "<0xXX>" → that byte) and GPT-2 byte-level pieces; control and
// unused tokens decode to "" (never produced as text).
#pragma once

#include <string>
#include <vector>

#include "agentq/engine.h"

namespace agentq::grammar {

struct gguf_vocab {
  std::vector<std::string> pieces;
  std::vector<token_id> eos_ids;
};

// false with *error on failure.
bool load_gguf_vocab(const std::string& path, gguf_vocab* out, std::string* error);

}  // namespace agentq::grammar
