// Byte-level BPE pre-tokenizers: the regex splits of GPT-2, Llama 3, Qwen2, Tekken, GPT-4o, Falcon,
// DeepSeek Coder, DeepSeek LLM, hand-written over code points (no std::regex: too slow, and no \p{L}).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace agentq {

enum class pre_type {
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,   // as llama3 with \p{N} (one digit per piece)
  gpt2_digits,  // \p{N} split first, then gpt2 (StarCoder, SmolLM, Command-R)
  tekken,  // Mistral Nemo: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
           //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|
           //   ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  gpt4o,   // as tekken, with (?i:'s|'t|'re|'ve|'m|'ll|'d)? after each word and \p{N}{1,3}
  // llama.cpp's multi-regex lists (each regex splits the previous pieces; gaps stay pieces):
  falcon,          // [\p{P}\$\+<=>\^~\|`]+ ; gpt2 ; [0-9][0-9][0-9]
  deepseek_coder,  // [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [一-龥ࠀ-一가-퟿]+ ; \p{N}
  deepseek_llm,    // [\r\n] ; \s?[letter ranges]+ ; \s?[!-/:-~！-／：-～‘-‟　-。]+ ; \s+$ ;
                   //   [一-龥ࠀ-一가-퟿]+ ; \p{N}+
};

struct byte_span {
  size_t begin = 0;  // byte offset into the text
  size_t end = 0;    // one past the last byte
};

// Split text into pieces that tile it in order (no gaps, none empty); appends to *out.
// Bytes that are not valid UTF-8 count as one "other" character each.
void pre_split(pre_type type, std::string_view text, std::vector<byte_span>* out);

}  // namespace agentq
