// Hand-written pre-tokenizer regexes (see pretokenize.h). Each branch mirrors
// one alternative of the pattern, tried in the pattern's order at each position.
#include "tokenizer/pretokenize.h"

#include <cstdint>
#include <iterator>
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
  f_upper = 16,  // ((?=[\p{L}])([^a-z])): A-Z and every non-ASCII letter (llama.cpp's reading, below)
  f_lower = 32,  // ((?=[\p{L}])([^A-Z])): a-z and every non-ASCII letter
};

// NOTE: the Tekken and GPT-4o (o200k) patterns name the classes [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}]; llama.cpp (llama-vocab.cpp) runs them rewritten as the lookaheads above on
// its collapsed text, where every non-ASCII letter is one class and a combining mark (\p{M}) is no
// letter. So a non-ASCII letter counts as both cases and a mark is split off the word (it joins the
// next piece as the optional prefix, or a punctuation run), as in Khmer or Devanagari, unlike
// tiktoken. The engine splits as llama.cpp does: the project's bar is llama.cpp on the same GGUF.

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
    case c::upper: case c::title: case c::lower: case c::modifier: case c::other_letter:
      return f_any | f_letter | f_upper | f_lower;
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
// backtracking where U and L overlap (every non-ASCII letter). Returns the end, or 0.
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

// '[一-龥ࠀ-一가-퟿]+' of deepseek-coder and deepseek-llm. NOTE: llama.cpp runs this regex (it names
// no \p{..}) with std::wregex on a copy of the text whose non-ASCII spaces became '\v', so the
// spaces inside U+0800..U+4E00 (U+1680, U+2000..U+200A, U+2028.., U+3000) are not in the class.
size_t match_cjk_run(const range& r, size_t pos) {
  return run(r, pos, [](uint32_t cp, uint8_t f) {
    return !(f & f_space) &&
           ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x0800 && cp <= 0x4E00) || (cp >= 0xAC00 && cp <= 0xD7FF));
  });
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
  refine(t, ends, match_cjk_run);
  refine(t, ends, [](const range& r, size_t pos) -> size_t { return (r.flag(pos) & f_number) != 0; });
}


// DeepSeek LLM: '[\r\n]', '\s?[LETTERS]+', '\s?[!-/:-~！-／：-～‘-‟　-。]+', '\s+$',
// '[一-龥ࠀ-一가-퟿]+', '\p{N}+'. Its letter and punctuation classes are explicit code point ranges
// (llama.cpp runs these regexes with std::wregex on the text itself, not on the collapsed text),
// and its '\s' is std::wregex's: ASCII's " \t\n\v\f\r", and every other Unicode space, which
// llama.cpp turns into '\v' first (so U+3000 is a space here, never the '　' of the class).
// '$' is the end of the piece the regex splits.
constexpr uint32_t k_deepseek_llm_letters[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x376}, {0x377, 0x377}, {0x37B, 0x37D},
    {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5},
    {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57},
    {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124},
    {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139},
    {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2183}, {0x2184, 0x2184},
    {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF2}, {0x2CF3, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E},
    {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
    {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
    {0x118A0, 0x118DF}, {0x1E900, 0x1E943}
};

bool is_deepseek_llm_letter(uint32_t cp) {
  size_t lo = 0, hi = std::size(k_deepseek_llm_letters);  // first range whose end is >= cp
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (k_deepseek_llm_letters[mid][1] < cp) lo = mid + 1; else hi = mid;
  }
  return lo < std::size(k_deepseek_llm_letters) && k_deepseek_llm_letters[lo][0] <= cp;
}

bool is_deepseek_llm_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) || cp == 0x3001 || cp == 0x3002;
}

void split_deepseek_llm(const cpt_text& t, std::vector<size_t>* ends) {
  ends->assign(1, t.cpts.size());
  refine(t, ends, [](const range& r, size_t pos) -> size_t { return r.cpt(pos) == '\r' || r.cpt(pos) == '\n'; });
  auto space_then = [](auto is_x) {  // '\s?X+'
    return [is_x](const range& r, size_t pos) -> size_t {
      auto xs = [&](size_t at) { return run(r, at, [&](uint32_t cp, uint8_t) { return is_x(cp); }); };
      if (const size_t n = xs(pos)) return n;
      if (r.flag(pos) & f_space)
        if (const size_t n = xs(pos + 1)) return n + 1;
      return 0;
    };
  };
  refine(t, ends, space_then(is_deepseek_llm_letter));
  refine(t, ends, space_then(is_deepseek_llm_punct));
  refine(t, ends, [](const range& r, size_t pos) -> size_t {  // '\s+$': the piece's trailing spaces
    const size_t n = run(r, pos, [](uint32_t, uint8_t f) { return (f & f_space) != 0; });
    return n > 0 && pos + n == r.hi ? n : 0;
  });
  refine(t, ends, match_cjk_run);
  refine(t, ends, [](const range& r, size_t pos) {
    return run(r, pos, [](uint32_t, uint8_t f) { return (f & f_number) != 0; });
  });
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
    case pre_type::deepseek_llm: split_deepseek_llm(t, &ends); break;
  }
  size_t begin = 0;
  for (size_t e : ends) {
    out->push_back({t.offs[begin], t.offs[e]});
    begin = e;
  }
}

}  // namespace agentq
