// The engine's tokenizers, built from a GGUF file's tokenizer.ggml.* metadata:
// SentencePiece-style (model "llama") and byte-level BPE (model "gpt2").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"
#include "gguf/reader.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/vocab_index.h"

namespace agentq {

// tokenizer.ggml.token_type values.
enum class token_type : uint8_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

enum class vocab_kind { spm, bpe };

// Immutable after load: every const method may be called from any thread.
class tokenizer {
 public:
  // Build from f's metadata; nullptr with *error set when the tokenizer model is
  // unknown or the vocabulary is missing or malformed. f may be closed afterwards.
  static std::unique_ptr<tokenizer> load(const gguf::file& f, std::string* error);

  // add_special: prepend BOS / append EOS as the model's metadata asks.
  // parse_special: text such as "<|im_start|>" becomes its control token; when
  // false only user-defined added tokens are matched (as llama.cpp and HF do).
  // Any bytes are accepted; invalid UTF-8 is encoded byte by byte.
  std::vector<token_id> encode(std::string_view text, bool add_special, bool parse_special) const;
  // encode() of text that continues a token sequence (no BOS/EOS): SentencePiece's space
  // prefix is added only when the text follows a special token (after_special), as it is
  // inside encode().
  std::vector<token_id> encode_continuation(std::string_view text, bool after_special, bool parse_special) const;
  // An upper bound on encode(text, add_special, parse_special).size() without encoding (the special
  // tokens are matched, the merges not run): the text's bytes, SentencePiece's escaping ('▁' for
  // each space and the prefixes, 3 bytes each), one per special match, BOS and EOS. For a check
  // that only needs to know a prompt fits (engine::validate): most do by far.
  size_t max_tokens(std::string_view text, bool add_special, bool parse_special) const;
  // A token encode() matches in text (control, user-defined): SentencePiece adds a space
  // prefix to the text after it.
  bool is_special_match(token_id id) const;

  // Bytes of one token: SentencePiece '▁' -> ' ', <0xXX> -> that byte, byte-level
  // BPE characters -> their bytes. Control/unknown/unused tokens give "" unless
  // special, then their text. Out-of-range ids give "".
  std::string token_to_piece(token_id id, bool special = false) const;
  // Concatenated pieces; drops the one leading space the SentencePiece prefix
  // added, so decode(encode(x, ...)) == x for text the vocabulary can represent.
  std::string decode(std::span<const token_id> ids, bool special = false) const;

  int32_t n_vocab() const { return static_cast<int32_t>(texts_.size()); }
  vocab_kind kind() const { return kind_; }
  token_id bos() const { return bos_; }
  token_id eos() const { return eos_; }
  token_id eot() const { return eot_; }      // -1 when the vocabulary has none
  token_id unk() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // SentencePiece: encode() puts a space before the text and after each special token.
  bool adds_space_prefix() const { return kind_ == vocab_kind::spm && add_space_prefix_; }
  // End of generation: eos, eot, eom and the other end-of-turn tokens.
  bool is_eog(token_id id) const;
  const std::vector<token_id>& eog_ids() const { return eog_ids_; }

  // Raw vocabulary string ("▁the", "Ġthe", "<0x0A>"); "" when out of range.
  const std::string& token_text(token_id id) const;
  // -1 when text is not a vocabulary entry.
  token_id find_token(std::string_view text) const;
  // Decoded bytes of every token (as token_to_piece(id, false)); "" for control,
  // unknown and unused tokens. Indexed by id; size n_vocab().
  const std::vector<std::string>& pieces() const { return pieces_; }
  bool is_control(token_id id) const;
  agentq::token_type token_type(token_id id) const;

 private:
  enum : uint8_t { attr_lstrip = 1, attr_rstrip = 2 };

  tokenizer() = default;
  bool init(const gguf::file& f, std::string* error);
  void init_special(const gguf::file& f);
  template <class OnText, class OnSpecial>
  void scan_specials(std::string_view text, bool parse_special, OnText&& on_text, OnSpecial&& on_special) const;
  void encode_into(std::string_view text, bool prev_special, bool parse_special, std::vector<token_id>* out) const;
  void encode_fragment(std::string_view text, bool space_prefix, std::vector<token_id>* out) const;
  void encode_spm(std::string_view text, std::vector<token_id>* out) const;
  void encode_spm_word(std::string_view text, std::vector<token_id>* out) const;
  void encode_bpe(std::string_view text, std::vector<token_id>* out) const;
  void encode_bpe_word(std::string_view word, std::vector<token_id>* out) const;
  void push_byte_spm(uint8_t byte, std::vector<token_id>* out) const;
  std::string make_piece(token_id id, bool special) const;

  vocab_kind kind_ = vocab_kind::spm;
  pre_type pre_ = pre_type::gpt2;
  std::vector<std::string> texts_;                    // [n_vocab] raw vocabulary strings
  std::vector<float> scores_;                         // [n_vocab] SPM merge scores
  std::vector<agentq::token_type> types_;             // [n_vocab]
  std::vector<uint8_t> attrs_;                        // [n_vocab] attr_* strip flags
  text_index text_to_id_;                             // over texts_
  merge_index merges_;                                // BPE: (left, right) -> rank, result
  token_id byte_tokens_[256];                         // SPM <0xXX> / BPE byte char; -1 if absent
  std::vector<std::string> pieces_;                   // [n_vocab] decoded bytes
  std::vector<token_id> special_ids_;                 // matched in text: control, user-defined, unknown
  std::vector<token_id> special_by_byte_[256];        // special_ids_ by first byte, longest first
  std::vector<token_id> eog_ids_;
  token_id bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  bool add_space_prefix_ = false;                     // SPM: "▁" before the text
  bool ignore_merges_ = false;                        // BPE: a word that is a token is taken whole
  bool has_user_defined_ = false;
  bool spm_split_words_ = false;                      // SPM: no token has '▁' after another character
};

}  // namespace agentq
