// Prompt splicing: held token ids kept while their bytes spell the new text, the rest
// tokenized as a continuation (see splice.h).
#include "tokenizer/splice.h"

#include <string>

namespace agentq {

splice_result splice_prompt(const tokenizer& tok, std::span<const token_id> held, std::string_view text,
                            bool add_special) {
  auto canonical = [&] {
    splice_result r;
    r.tokens = tok.encode(text, add_special, true);
    return r;
  };
  // ends[k]: bytes of text the first k held tokens spell; special[k]: token k-1 is special
  std::vector<size_t> ends{0};
  std::vector<bool> special{true};  // the start counts as "after a special" (SPM space prefix)
  size_t k0 = 0;
  if (add_special && tok.add_bos() && tok.bos() >= 0) {
    // BOS that encode() adds is not in text
    if (held.empty() || held[0] != tok.bos()) return canonical();
    ends.push_back(0);
    special.push_back(true);
    k0 = 1;
  }
  for (size_t k = k0; k < held.size(); ++k) {
    const token_id id = held[k];
    if (id < 0 || id >= tok.n_vocab()) break;
    const bool is_special = tok.is_special_match(id);
    std::string_view piece = is_special ? std::string_view(tok.token_text(id)) : std::string_view(tok.pieces()[size_t(id)]);
    if (piece.empty()) break;  // unknown / unused / BOS inside: no bytes to match
    // NOTE: the space SentencePiece puts before a fragment is in the piece, not in the text.
    if (!is_special && special.back() && tok.adds_space_prefix() && piece[0] == ' ') piece.remove_prefix(1);
    const size_t pos = ends.back();
    if (text.size() - pos < piece.size() || text.compare(pos, piece.size(), piece) != 0) break;  // diverges (maybe mid-token)
    ends.push_back(pos + piece.size());
    special.push_back(is_special);
  }
  size_t k = ends.size() - 1;
  // Back off to a UTF-8 character boundary (byte-fallback tokens may end inside a character).
  while (k > k0 && ends[k] < text.size() && (uint8_t(text[ends[k]]) & 0xC0) == 0x80) --k;
  if (k <= k0) return canonical();
  const size_t pos = ends[k];
  // NOTE: a check of the byte model above (strip flags, added tokens): the kept tokens must
  // decode as the canonical tokens of the same bytes do; otherwise take the canonical prompt.
  const std::span<const token_id> kept = held.first(k);
  if (tok.decode(kept, true) != tok.decode(tok.encode(text.substr(0, pos), add_special, true), true)) return canonical();
  splice_result r;
  r.tokens.assign(kept.begin(), kept.end());
  r.n_kept = int32_t(k);
  const auto rest = tok.encode_continuation(text.substr(pos), special[k], true);
  r.tokens.insert(r.tokens.end(), rest.begin(), rest.end());
  return r;
}

}  // namespace agentq
