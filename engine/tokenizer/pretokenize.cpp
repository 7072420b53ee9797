// Hand-written pre-tokenizer regexes (see pretokenize.h). Each branch mirrors
// one alternative of the pattern, tried in the pattern's order at each position.
#include "tokenizer/pretokenize.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "tokenizer/unicode.h"

namespace agentq {

namespace {

enum : uint8_t {
  f_letter = 1,  // \p{L}
  f_number = 2,  // \p{N}
  f_space = 4,   // \s
  f_any = 8,     // any character (0 flags: past the end of the range)
  f_upper = 16,  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  f_lower = 32,  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

uint8_t flags_of(uint32_t cp) {
  if (cp < 0x80) {
    if (cp >= 'a' && cp <= 'z') return f_any | f_letter | f_lower;
    if (cp >= 'A' && cp <= 'Z') return f_any | f_letter | f_upper;
    if (cp >= '0' && cp <= '9') return f_any | f_number;
    return unicode::is_whitespace(cp) ? f_any | f_space : f_any;
  }
  if (unicode::is_whitespace(cp)) return f_any | f_space;
  using c = unicode::cpt_class;
  switch (unicode::class_of(cp)) {
    case c::upper: case c::title: return f_any | f_letter | f_upper;
    case c::lower: return f_any | f_letter | f_lower;
    case c::modifier: case c::other_letter: return f_any | f_letter | f_upper | f_lower;
    case c::mark: return f_any | f_upper | f_lower;
    case c::number: return f_any | f_number;
    default: return f_any;
  }
}

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
      cpts.push_back(cp);
      flags.push_back(flags_of(cp));
      offs.push_back(pos);
      pos += len;
    }
    offs.push_back(text.size());
  }
};

// A range [lo, hi) of the text, read as if nothing were outside it.
struct range {
  const cpt_text& t;
  size_t lo, hi;
  uint32_t cpt(size_t i) const { return i < hi ? t.cpts[i] : UINT32_MAX; }
  uint8_t flag(size_t i) const { return i < hi ? t.flags[i] : 0; }
  bool is_punct(size_t i) const {  // [^\s\p{L}\p{N}]
    const uint8_t f = flag(i);
    return (f & f_any) && !(f & (f_letter | f_number | f_space));
  }
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction 's|'t|'re|'ve|'m|'ll|'d at pos, or 0.
size_t match_contraction(const range& r, size_t pos, bool ignore_case) {
  if (r.cpt(pos) != '\'') return 0;
  auto at = [&](size_t i) { return ignore_case ? ascii_lower(r.cpt(i)) : r.cpt(i); };
  const uint32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = at(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The whitespace tail shared by the llama3-style patterns: \s*[\r\n]+|\s+(?!\S)|\s+,
// or a lone character nothing else matched. Returns the end of the piece.
size_t match_space_tail(const range& r, size_t pos, bool newline_rule) {
  size_t n_space = 0, last_newline_end = 0;
  while (r.flag(pos + n_space) & f_space) {
    const uint32_t c = r.cpt(pos + n_space);
    ++n_space;
    if (c == '\r' || c == '\n') last_newline_end = pos + n_space;
  }
  if (newline_rule && last_newline_end > 0) return last_newline_end;  // '\s*[\r\n]+'
  if (n_space > 1 && pos + n_space < r.hi) return pos + n_space - 1;  // '\s+(?!\S)': leave one for the next word
  return pos + (n_space > 0 ? n_space : 1);                             // '\s+', or a lone character
}

void split_gpt2(const range& r, std::vector<size_t>* ends) {
  for (size_t pos = r.lo; pos < r.hi;) {
    const uint32_t cp = r.cpt(pos);
    if (size_t k = match_contraction(r, pos, false)) {
      pos += k;
    } else if (const uint8_t f2 = cp == ' ' ? r.flag(pos + 1) : r.flag(pos); f2 & f_letter) {  // ' ?\p{L}+'
      for (pos += cp == ' '; r.flag(pos) & f_letter;) ++pos;
    } else if (f2 & f_number) {  // ' ?\p{N}+'
      for (pos += cp == ' '; r.flag(pos) & f_number;) ++pos;
    } else if ((f2 & f_any) && !(f2 & f_space)) {  // ' ?[^\s\p{L}\p{N}]+'
      for (pos += cp == ' '; r.is_punct(pos);) ++pos;
    } else {
      pos = match_space_tail(r, pos, false);
    }
    ends->push_back(pos);
  }
}

// \p{N} first: each digit its own piece, gpt2 on the text between.
void split_gpt2_digits(const range& r, std::vector<size_t>* ends) {
  for (size_t pos = r.lo; pos < r.hi;) {
    if (r.flag(pos) & f_number) {
      ends->push_back(++pos);
      continue;
    }
    size_t end = pos;
    while (end < r.hi && !(r.flag(end) & f_number)) ++end;
    split_gpt2(range{r.t, pos, end}, ends);
    pos = end;
  }
}

// llama3 and qwen2; they differ only in the digits per number piece.
void split_llama3(const range& r, size_t max_digits, std::vector<size_t>* ends) {
  for (size_t pos = r.lo; pos < r.hi;) {
    const uint32_t cp = r.cpt(pos);
    const uint8_t f = r.flag(pos);
    if (size_t k = match_contraction(r, pos, true)) {  // (?i:'s|'t|...)
      pos += k;
    } else if (!(cp == '\r' || cp == '\n' || (f & f_number)) &&
               ((f & f_letter) || (r.flag(pos + 1) & f_letter))) {  // '[^\r\n\p{L}\p{N}]?\p{L}+'
      for (++pos; r.flag(pos) & f_letter;) ++pos;
    } else if (f & f_number) {  // '\p{N}{1,max_digits}'
      for (size_t k = 0; k < max_digits && (r.flag(pos) & f_number); ++k) ++pos;
    } else if (const uint8_t f2 = cp == ' ' ? r.flag(pos + 1) : f; (f2 & f_any) && !(f2 & (f_letter | f_number | f_space))) {
      // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
      for (pos += cp == ' '; r.is_punct(pos);) ++pos;
      while (r.cpt(pos) == '\r' || r.cpt(pos) == '\n') ++pos;
    } else {
      pos = match_space_tail(r, pos, true);
    }
    ends->push_back(pos);
  }
}

// Tekken / GPT-4o word: alternative 1 is  P? U* L+ , alternative 2 is  P? U+ L*
// (P the optional [^\r\n\p{L}\p{N}] prefix). Tried in regex order, with
// backtracking where U and L overlap (Lm, Lo, M). Returns the end, or 0.
size_t match_cased_word(const range& r, size_t pos) {
  const uint32_t cp = r.cpt(pos);
  const uint8_t f = r.flag(pos);
  const bool can_prefix = cp != '\r' && cp != '\n' && (f & f_any) && !(f & (f_letter | f_number));
  const size_t starts[2] = {pos + 1, pos};
  const size_t* first = can_prefix ? starts : starts + 1;
  for (int alt = 1; alt <= 2; ++alt) {
    for (const size_t* s = first; s != starts + 2; ++s) {
      size_t q = *s;
      while (r.flag(q) & f_upper) ++q;  // greedy U run [*s, q)
      if (alt == 1) {
        for (size_t b = q + 1; b-- > *s;) {  // give back U chars until L+ can start
          if (r.flag(b) & f_lower) {
            while (r.flag(b) & f_lower) ++b;
            return b;
          }
        }
      } else if (q > *s) {
        while (r.flag(q) & f_lower) ++q;
        return q;
      }
    }
  }
  return 0;
}

void split_cased(const range& r, size_t max_digits, bool contractions, std::vector<size_t>* ends) {
  for (size_t pos = r.lo; pos < r.hi;) {
    const uint32_t cp = r.cpt(pos);
    const uint8_t f = r.flag(pos);
    if (size_t end = match_cased_word(r, pos)) {
      pos = end;
      if (contractions) pos += match_contraction(r, pos, true);
    } else if (f & f_number) {
      for (size_t k = 0; k < max_digits && (r.flag(pos) & f_number); ++k) ++pos;
    } else if (const uint8_t f2 = cp == ' ' ? r.flag(pos + 1) : f; (f2 & f_any) && !(f2 & (f_letter | f_number | f_space))) {
      // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
      for (pos += cp == ' '; r.is_punct(pos);) ++pos;
      while (r.cpt(pos) == '\r' || r.cpt(pos) == '\n' || r.cpt(pos) == '/') ++pos;
    } else {
      pos = match_space_tail(r, pos, true);
    }
    ends->push_back(pos);
  }
}

// --- llama.cpp's multi-regex pre-tokenizers (unicode_regex_split) --------------------------
// Each regex of the list splits every piece made so far into its leftmost matches and the gaps
// between them, which stay pieces of their own. The regexes that name \p{..} classes run on
// llama.cpp's "collapsed" text, where ASCII keeps its own classes (\p{P} is only
// !"#%&'()*,-./:;?@[\]_{}, \s is ASCII's " \t\n\v\f\r") and other code points stand for their
// category (whitespace first).

bool is_p_llamacpp(uint32_t cp) {  // \p{P} as llama.cpp's collapsed regexes read it
  if (cp < 0x80) {
    switch (cp) {
      case '$': case '+': case '<': case '=': case '>': case '^': case '`': case '|': case '~': return false;
      default: return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                      (cp >= 0x7B && cp <= 0x7E);
    }
  }
  return !unicode::is_whitespace(cp) && unicode::class_of(cp) == unicode::cpt_class::punctuation;
}

// Refines *ends (piece ends over t) by one regex: match(r, pos) is the length of its match at pos
// (0: none), r the piece as a range.
template <class Match>
void refine(const cpt_text& t, std::vector<size_t>* ends, Match match) {
  std::vector<size_t> out;
  out.reserve(ends->size() * 2);
  size_t begin = 0;
  for (size_t e : *ends) {
    const range r{t, begin, e};
    size_t gap = begin;
    for (size_t pos = begin; pos < e;) {
      const size_t n = match(r, pos);
      if (n == 0) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back(pos);
      pos += n;
      out.push_back(pos);
      gap = pos;
    }
    if (gap < e) out.push_back(e);
    begin = e;
  }
  *ends = std::move(out);
}

// Length of a run of code points from pos for which pred holds.
template <class Pred>
size_t run(const range& r, size_t pos, Pred pred) {
  size_t n = 0;
  while (pos + n < r.hi && pred(r.cpt(pos + n), r.flag(pos + n))) ++n;
  return n;
}

bool is_ascii_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

// '[0-9][0-9][0-9]'
size_t match_digit_triplet(const range& r, size_t pos) {
  return is_ascii_digit(r.cpt(pos)) && is_ascii_digit(r.cpt(pos + 1)) && is_ascii_digit(r.cpt(pos + 2)) ? 3 : 0;
}

// Falcon: '[\p{P}\$\+<=>\^~\|`]+' (every ASCII punctuation and symbol, other \p{P}), then GPT-2's
// regex in each piece, then '[0-9][0-9][0-9]'.
void split_falcon(const cpt_text& t, std::vector<size_t>* ends) {
  ends->assign(1, t.cpts.size());
  refine(t, ends, [](const range& r, size_t pos) {
    return run(r, pos, [](uint32_t cp, uint8_t) {
      return cp < 0x80 ? (cp >= 0x21 && cp <= 0x7E && !(cp >= '0' && cp <= '9') && !(cp >= 'A' && cp <= 'Z') &&
                          !(cp >= 'a' && cp <= 'z'))
                       : is_p_llamacpp(cp);
    });
  });
  std::vector<size_t> pieces;
  size_t begin = 0;
  for (size_t e : *ends) {
    split_gpt2(range{t, begin, e}, &pieces);
    begin = e;
  }
  *ends = std::move(pieces);
  refine(t, ends, match_digit_triplet);
}

// DeepSeek Coder: '[\r\n]', '\s?\p{L}+', '\s?\p{P}+', '[一-龥ࠀ-一가-퟿]+', '\p{N}'.
void split_deepseek_coder(const cpt_text& t, std::vector<size_t>* ends) {
  ends->assign(1, t.cpts.size());
  refine(t, ends, [](const range& r, size_t pos) -> size_t { return r.cpt(pos) == '\r' || r.cpt(pos) == '\n'; });
  // '\s?X+': X at pos, or one whitespace then X
  auto space_then = [](auto is_x) {
    return [is_x](const range& r, size_t pos) -> size_t {
      auto xs = [&](size_t at) { return run(r, at, [&](uint32_t cp, uint8_t f) { return is_x(cp, f); }); };
      if (const size_t n = xs(pos)) return n;
      if (r.flag(pos) & f_space)
        if (const size_t n = xs(pos + 1)) return n + 1;
      return 0;
    };
  };
  refine(t, ends, space_then([](uint32_t, uint8_t f) { return (f & f_letter) != 0; }));
  refine(t, ends, space_then([](uint32_t cp, uint8_t) { return is_p_llamacpp(cp); }));
  refine(t, ends, [](const range& r, size_t pos) {
    return run(r, pos, [](uint32_t cp, uint8_t) {
      return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x0800 && cp <= 0x4E00) || (cp >= 0xAC00 && cp <= 0xD7FF);
    });
  });
  refine(t, ends, [](const range& r, size_t pos) -> size_t { return (r.flag(pos) & f_number) != 0; });
}

}  // namespace

void pre_split(pre_type type, std::string_view text, std::vector<byte_span>* out) {
  if (text.empty()) return;
  const cpt_text t(text);
  const range all{t, 0, t.cpts.size()};
  std::vector<size_t> ends;  // code point index one past each piece
  ends.reserve(t.cpts.size() / 3 + 1);
  switch (type) {
    case pre_type::gpt2: split_gpt2(all, &ends); break;
    case pre_type::gpt2_digits: split_gpt2_digits(all, &ends); break;
    case pre_type::llama3: split_llama3(all, 3, &ends); break;
    case pre_type::qwen2: split_llama3(all, 1, &ends); break;
    case pre_type::tekken: split_cased(all, 1, false, &ends); break;
    case pre_type::gpt4o: split_cased(all, 3, true, &ends); break;
    case pre_type::falcon: split_falcon(t, &ends); break;
    case pre_type::deepseek_coder: split_deepseek_coder(t, &ends); break;
  }
  size_t begin = 0;
  for (size_t e : ends) {
    out->push_back({t.offs[begin], t.offs[e]});
    begin = e;
  }
}

}  // namespace agentq
