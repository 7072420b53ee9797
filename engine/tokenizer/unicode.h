// Unicode helpers for the tokenizers: lenient UTF-8 decoding, a coarse
// general-category classifier (\p{L}, \p{N}, \s ...) and GPT-2's byte<->unicode map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentq::unicode {

// Unicode general category, letters by case, the rest by first letter.
enum class cpt_class : uint8_t {
  undefined = 0,     // unassigned code point
  upper = 1,         // Lu
  lower = 2,         // Ll
  title = 3,         // Lt
  modifier = 4,      // Lm
  other_letter = 5,  // Lo
  mark = 6,          // \p{M}
  number = 7,        // \p{N}
  punctuation = 8,   // \p{P}
  symbol = 9,        // \p{S}
  separator = 10,    // \p{Z}
  other = 11,        // \p{C}; also a byte that is not valid UTF-8
};

// Marks a byte that does not start a valid UTF-8 sequence: cpt = k_invalid_base + byte.
constexpr uint32_t k_invalid_base = 0x110000;

// Decode one code point at text[pos]; *len gets the bytes consumed (>= 1).
// Invalid, overlong, surrogate or truncated sequences consume one byte and
// return k_invalid_base + that byte, so every byte survives a decode.
uint32_t decode_utf8(std::string_view text, size_t pos, size_t* len);

// Length of the valid UTF-8 sequence starting at text[pos], or 0 when invalid.
size_t valid_utf8_len(std::string_view text, size_t pos);

// Append the UTF-8 encoding of cpt (< 0x110000) to out.
void append_utf8(std::string& out, uint32_t cpt);

cpt_class class_of(uint32_t cpt);
// \s: the Unicode White_Space property (what HF tokenizer regexes use).
bool is_whitespace(uint32_t cpt);
inline bool is_letter(cpt_class c) { return c >= cpt_class::upper && c <= cpt_class::other_letter; }
inline bool is_letter(uint32_t cpt) { return is_letter(class_of(cpt)); }
inline bool is_number(uint32_t cpt) { return class_of(cpt) == cpt_class::number; }

// GPT-2 byte-level mapping: every byte gets a printable code point.
uint32_t byte_to_cpt(uint8_t byte);
// Inverse; -1 when cpt is not the image of a byte.
int cpt_to_byte(uint32_t cpt);

}  // namespace agentq::unicode
