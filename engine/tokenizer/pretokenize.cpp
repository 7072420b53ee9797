// Hand-written pre-tokenizer regexes (see pretokenize.h). Each branch mirrors
// one alternative of the pattern, tried in the pattern's order at each position.
#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace agentq {

namespace {

enum : uint8_t { f_letter = 1, f_number = 2, f_space = 4, f_any = 8 };

struct cpt_text {
  std::vector<uint32_t> cpts;
  std::vector<uint8_t> flags;
  std::vector<size_t> offs;  // byte offset of each code point; offs[n] = text size

  explicit cpt_text(std::string_view text) {
    cpts.reserve(text.size());
    flags.reserve(text.size());
    offs.reserve(text.size() + 1);
    for (size_t pos = 0; pos < text.size();) {
      size_t len = 1;
      const uint32_t cp = unicode::decode_utf8(text, pos, &len);
      uint8_t f = f_any;
      if (cp < 0x80) {
        const char c = static_cast<char>(cp);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) f |= f_letter;
        else if (c >= '0' && c <= '9') f |= f_number;
        else if (unicode::is_whitespace(cp)) f |= f_space;
      } else if (unicode::is_whitespace(cp)) {
        f |= f_space;
      } else {
        const auto cls = unicode::class_of(cp);
        if (cls == unicode::cpt_class::letter) f |= f_letter;
        else if (cls == unicode::cpt_class::number) f |= f_number;
      }
      cpts.push_back(cp);
      flags.push_back(f);
      offs.push_back(pos);
      pos += len;
    }
    offs.push_back(text.size());
  }
  size_t size() const { return cpts.size(); }
  uint32_t cpt(size_t i) const { return i < cpts.size() ? cpts[i] : UINT32_MAX; }
  uint8_t flag(size_t i) const { return i < flags.size() ? flags[i] : 0; }
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction 's|'t|'re|'ve|'m|'ll|'d at pos, or 0.
size_t match_contraction(const cpt_text& t, size_t pos, bool ignore_case) {
  if (t.cpt(pos) != '\'') return 0;
  auto at = [&](size_t i) { return ignore_case ? ascii_lower(t.cpt(i)) : t.cpt(i); };
  const uint32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = at(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

void split_gpt2(const cpt_text& t, std::vector<size_t>* ends) {
  const size_t n = t.size();
  for (size_t pos = 0; pos < n;) {
    const uint32_t cp = t.cpt(pos);
    if (size_t k = match_contraction(t, pos, false)) {
      pos += k;
      ends->push_back(pos);
      continue;
    }
    // ' ?' prefix: the class is decided by the character after the space
    uint8_t f2 = cp == ' ' ? t.flag(pos + 1) : t.flag(pos);
    if (f2 & f_letter) {  // ' ?\p{L}+'
      pos += cp == ' ';
      while (t.flag(pos) & f_letter) ++pos;
      ends->push_back(pos);
      continue;
    }
    if (f2 & f_number) {  // ' ?\p{N}+'
      pos += cp == ' ';
      while (t.flag(pos) & f_number) ++pos;
      ends->push_back(pos);
      continue;
    }
    if ((f2 & f_any) && !(f2 & (f_letter | f_number | f_space))) {  // ' ?[^\s\p{L}\p{N}]+'
      pos += cp == ' ';
      for (uint8_t f = t.flag(pos); (f & f_any) && !(f & (f_letter | f_number | f_space)); f = t.flag(++pos)) {}
      ends->push_back(pos);
      continue;
    }
    size_t n_space = 0;
    while (t.flag(pos + n_space) & f_space) ++n_space;
    if (n_space > 1 && pos + n_space < n) {  // '\s+(?!\S)': leave the last space to the next word
      pos += n_space - 1;
      ends->push_back(pos);
      continue;
    }
    pos += n_space > 0 ? n_space : 1;  // '\s+', or a lone character nothing matched
    ends->push_back(pos);
  }
}

// llama3 and qwen2; they differ only in the digits per number piece.
void split_llama3(const cpt_text& t, size_t max_digits, std::vector<size_t>* ends) {
  const size_t n = t.size();
  for (size_t pos = 0; pos < n;) {
    const uint32_t cp = t.cpt(pos);
    const uint8_t f = t.flag(pos);
    if (size_t k = match_contraction(t, pos, true)) {  // (?i:'s|'t|...)
      pos += k;
      ends->push_back(pos);
      continue;
    }
    // '[^\r\n\p{L}\p{N}]?\p{L}+'
    if (!(cp == '\r' || cp == '\n' || (f & f_number)) && ((f & f_letter) || (t.flag(pos + 1) & f_letter))) {
      ++pos;
      while (t.flag(pos) & f_letter) ++pos;
      ends->push_back(pos);
      continue;
    }
    if (f & f_number) {  // '\p{N}{1,max_digits}'
      size_t k = 0;
      while (k < max_digits && (t.flag(pos) & f_number)) { ++pos; ++k; }
      ends->push_back(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    uint8_t f2 = cp == ' ' ? t.flag(pos + 1) : f;
    if ((f2 & f_any) && !(f2 & (f_letter | f_number | f_space))) {
      pos += cp == ' ';
      for (uint8_t g = t.flag(pos); (g & f_any) && !(g & (f_letter | f_number | f_space)); g = t.flag(++pos)) {}
      while (t.cpt(pos) == '\r' || t.cpt(pos) == '\n') ++pos;
      ends->push_back(pos);
      continue;
    }
    size_t n_space = 0, last_newline_end = 0;
    while (t.flag(pos + n_space) & f_space) {
      const uint32_t c = t.cpt(pos + n_space);
      ++n_space;
      if (c == '\r' || c == '\n') last_newline_end = pos + n_space;
    }
    if (last_newline_end > 0) {  // '\s*[\r\n]+'
      pos = last_newline_end;
    } else if (n_space > 1 && pos + n_space < n) {  // '\s+(?!\S)'
      pos += n_space - 1;
    } else {
      pos += n_space > 0 ? n_space : 1;  // '\s+', or a lone character
    }
    ends->push_back(pos);
  }
}

}  // namespace

void pre_split(pre_type type, std::string_view text, std::vector<byte_span>* out) {
  if (text.empty()) return;
  const cpt_text t(text);
  std::vector<size_t> ends;  // code point index one past each piece
  ends.reserve(t.size() / 3 + 1);
  switch (type) {
    case pre_type::gpt2: split_gpt2(t, &ends); break;
    case pre_type::llama3: split_llama3(t, 3, &ends); break;
    case pre_type::qwen2: split_llama3(t, 1, &ends); break;
  }
  size_t begin = 0;
  for (size_t e : ends) {
    out->push_back({t.offs[begin], t.offs[e]});
    begin = e;
  }
}

}  // namespace agentq
