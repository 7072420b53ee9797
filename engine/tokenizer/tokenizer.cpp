// Tokenizer loading from GGUF metadata, special-token partitioning, encode
// dispatch and decoding. The SPM and BPE merge loops live in spm.cpp and bpe.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace agentq {

namespace {

constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // U+2581 '▁'

// Texts llama.cpp treats as end-of-turn when the metadata names no eot token, in priority order.
constexpr std::string_view k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};
// Every token with one of these texts ends generation.
constexpr std::string_view k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "</s>", "<｜end▁of▁sentence｜>",
};

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::unique_ptr<tokenizer> tokenizer::load(const gguf::file& f, std::string* error) {
  std::unique_ptr<tokenizer> t(new tokenizer());
  std::string err;
  if (!t->init(f, &err)) {
    if (error) *error = err;
    return nullptr;
  }
  return t;
}

bool tokenizer::init(const gguf::file& f, std::string* error) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) {
    *error = "no tokenizer in model file (tokenizer.ggml.model missing)";
    return false;
  }
  if (*model == "llama") {
    kind_ = vocab_kind::spm;
  } else if (*model == "gpt2") {
    kind_ = vocab_kind::bpe;
  } else {
    *error = "unsupported tokenizer model '" + std::string(*model) + "' (supported: llama, gpt2)";
    return false;
  }

  const gguf::value* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->elem_type != gguf::value_type::string || tokens->strs.empty()) {
    *error = "tokenizer vocabulary missing or empty (tokenizer.ggml.tokens)";
    return false;
  }
  const size_t n = tokens->strs.size();
  if (n > static_cast<size_t>(INT32_MAX)) {
    *error = "tokenizer vocabulary too large";
    return false;
  }
  const gguf::value* scores = f.find("tokenizer.ggml.scores");
  if (scores && (!scores->is_array() || scores->raw == nullptr || scores->n < n)) {
    *error = "tokenizer.ggml.scores is not a numeric array covering the vocabulary";
    return false;
  }
  const gguf::value* types = f.find("tokenizer.ggml.token_type");
  if (types && (!types->is_array() || types->raw == nullptr || types->n < n)) {
    *error = "tokenizer.ggml.token_type is not an integer array covering the vocabulary";
    return false;
  }

  texts_.reserve(n);
  scores_.assign(n, 0.0f);
  types_.assign(n, agentq::token_type::normal);
  attrs_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    texts_.emplace_back(tokens->strs[i]);
    if (scores) {
      const auto v = static_cast<float>(scores->at_f64(i));
      scores_[i] = std::isfinite(v) ? v : -FLT_MAX;  // NOTE: NaN would break the merge queue's ordering
    }
    if (types) {
      const int64_t t = types->at_i64(i);
      types_[i] = (t >= 0 && t <= 6) ? static_cast<agentq::token_type>(t) : agentq::token_type::undefined;
    }
  }
  text_to_id_.build(texts_);  // NOTE: texts_ must not change from here on

  if (kind_ == vocab_kind::bpe) {
    const auto pre = f.get_string("tokenizer.ggml.pre").value_or("default");
    add_bos_ = false;
    if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "pixtral" ||
        pre == "dbrx" || pre == "smaug-bpe" || pre == "chatglm-bpe" || pre == "glm4") {
      pre_ = pre_type::llama3;
      ignore_merges_ = pre != "dbrx" && pre != "smaug-bpe" && pre != "chatglm-bpe" && pre != "glm4";
      add_bos_ = ignore_merges_;
    } else if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "megrez" ||
               pre == "hunyuan") {
      pre_ = pre_type::qwen2;
    } else if (pre == "tekken") {
      pre_ = pre_type::tekken;
      ignore_merges_ = true;
      add_bos_ = true;
    } else if (pre == "gpt-4o" || pre == "llama4") {
      pre_ = pre_type::gpt4o;
    } else if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
               pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
      pre_ = pre_type::gpt2_digits;
    } else if (pre == "falcon") {
      pre_ = pre_type::falcon;
    } else if (pre == "deepseek-coder") {
      pre_ = pre_type::deepseek_coder;
    } else if (pre == "deepseek-llm") {
      pre_ = pre_type::deepseek_llm;
    } else if (pre == "gpt-2" || pre == "phi-2" || pre == "jina-es" || pre == "jina-de" || pre == "gigachat" ||
               pre == "jina-v2-es" || pre == "jina-v2-de" || pre == "a.x-4.0" || pre == "mellum" ||
               pre == "modern-bert" || pre == "jina-v1-en" || pre == "jina-v2-code" || pre == "roberta-bpe" ||
               pre == "mpt" || pre == "olmo" || pre == "jais") {
      // llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2 names, and MPT, OLMo and JAIS, which llama.cpp splits
      // with the same regex and no other option
      pre_ = pre_type::gpt2;
    } else if (pre == "default") {
      // NOTE: "default" (also what an absent key means, as in llama.cpp) splits as GPT-2 does;
      // llama.cpp's default regex set differs in punctuation and digit runs, so a few splits may differ.
      pre_ = pre_type::gpt2;
    } else {
      // NOTE: refused, not split as GPT-2: a wrong pre-tokenizer gives valid ids that are not the
      // model's, which no error would ever show.
      *error = "unsupported pre-tokenizer '" + std::string(pre) +
               "' (tokenizer.ggml.pre; supported: default, gpt-2 and its aliases, llama3/llama-bpe, qwen2, tekken, "
               "gpt-4o, starcoder/refact/smollm and the other digit-splitting GPT-2 variants, mpt/olmo, falcon, "
               "deepseek-coder, deepseek-llm)";
      return false;
    }
    const gguf::value* merges = f.find("tokenizer.ggml.merges");
    if (!merges || !merges->is_array() || merges->elem_type != gguf::value_type::string) {
      *error = "byte-level BPE tokenizer without merges (tokenizer.ggml.merges)";
      return false;
    }
    merges_.reserve(merges->strs.size());
    std::string joined;
    for (size_t rank = 0; rank < merges->strs.size(); ++rank) {
      const std::string_view m = merges->strs[rank];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) continue;
      const token_id left = find_token(m.substr(0, sp));
      const token_id right = find_token(m.substr(sp + 1));
      joined.assign(m.substr(0, sp));
      joined.append(m.substr(sp + 1));
      const token_id result = find_token(joined);
      if (left < 0 || right < 0 || result < 0) continue;
      merges_.insert(left, right, {static_cast<int32_t>(rank), result});
    }
    for (int b = 0; b < 256; ++b) {
      std::string s;
      unicode::append_utf8(s, unicode::byte_to_cpt(static_cast<uint8_t>(b)));
      byte_tokens_[b] = find_token(s);
    }
  } else {
    add_bos_ = true;
    add_space_prefix_ = true;
    bos_ = 1;
    eos_ = 2;
    unk_ = 0;
    static const char* hex = "0123456789ABCDEF";
    // Words may be encoded one by one when no token joins a character to a following '▁':
    // then no merge can cross a word start and the result is the same, with small queues.
    spm_split_words_ = true;
    for (const std::string& t : texts_) {
      for (size_t at = t.find(k_space_marker, 1); at != std::string::npos; at = t.find(k_space_marker, at + 1)) {
        if (at < k_space_marker.size() || t.compare(at - k_space_marker.size(), k_space_marker.size(), k_space_marker) != 0) {
          spm_split_words_ = false;
        }
      }
    }
    for (int b = 0; b < 256; ++b) {
      const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
      token_id id = find_token(buf);
      if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
      byte_tokens_[b] = id;
    }
  }
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(add_space_prefix_);
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token").value_or(add_bos_);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token").value_or(add_eos_);
  init_special(f);
  return true;
}

void tokenizer::init_special(const gguf::file& f) {
  const auto n = static_cast<int64_t>(texts_.size());
  auto read_id = [&](const char* key, token_id* id) {
    if (*id >= n) *id = -1;  // a default beyond this vocabulary
    const auto v = f.get_int(key);
    if (v && *v >= 0 && *v < n) *id = static_cast<token_id>(*v);
  };
  read_id("tokenizer.ggml.bos_token_id", &bos_);
  read_id("tokenizer.ggml.eos_token_id", &eos_);
  read_id("tokenizer.ggml.eot_token_id", &eot_);
  read_id("tokenizer.ggml.eom_token_id", &eom_);
  read_id("tokenizer.ggml.unknown_token_id", &unk_);

  // Tokens that end a turn are control tokens whatever the file says (as llama.cpp).
  auto mark_control = [&](token_id id) {
    if (id >= 0) types_[id] = agentq::token_type::control;
  };
  if (eot_ < 0) {
    for (std::string_view t : k_eot_texts) {
      if ((eot_ = find_token(t)) >= 0) break;
    }
    mark_control(eot_);
  }
  if (eom_ < 0) mark_control(eom_ = find_token("<|eom_id|>"));

  auto add_eog = [&](token_id id) {
    if (id >= 0 && std::find(eog_ids_.begin(), eog_ids_.end(), id) == eog_ids_.end()) eog_ids_.push_back(id);
  };
  for (std::string_view t : k_eog_texts) {
    const token_id id = find_token(t);
    add_eog(id);
    mark_control(id);
  }
  add_eog(eos_);
  add_eog(eot_);
  add_eog(eom_);
  std::sort(eog_ids_.begin(), eog_ids_.end());

  for (token_id id = 0; id < n; ++id) {
    const auto t = types_[id];
    if (texts_[id].empty()) continue;
    if (t == agentq::token_type::control || t == agentq::token_type::user_defined ||
        t == agentq::token_type::unknown) {
      special_ids_.push_back(id);
      has_user_defined_ |= t == agentq::token_type::user_defined;
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](token_id a, token_id b) { return texts_[a].size() > texts_[b].size(); });
  for (token_id id : special_ids_) special_by_byte_[static_cast<uint8_t>(texts_[id][0])].push_back(id);

  // NOTE: Phi-3's added tokens swallow the whitespace after them (rstrip in its
  // tokenizer.json); llama.cpp applies this by model name and so do we.
  std::string name(f.get_string("general.name").value_or(""));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (token_id id : special_ids_) attrs_[id] |= attr_rstrip;
    if (token_id id = find_token("</s>"); id >= 0) attrs_[id] |= attr_rstrip;
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (token_id id = find_token(t); id >= 0) attrs_[id] &= ~attr_rstrip;
    }
  }

  pieces_.resize(texts_.size());
  for (token_id id = 0; id < n; ++id) pieces_[id] = make_piece(id, false);
}

token_id tokenizer::find_token(std::string_view text) const {
  return text_to_id_.find(text);
}

const std::string& tokenizer::token_text(token_id id) const {
  static const std::string empty;
  return (id >= 0 && id < n_vocab()) ? texts_[id] : empty;
}

agentq::token_type tokenizer::token_type(token_id id) const {
  return (id >= 0 && id < n_vocab()) ? types_[id] : agentq::token_type::undefined;
}

bool tokenizer::is_control(token_id id) const { return token_type(id) == agentq::token_type::control; }

bool tokenizer::is_eog(token_id id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::vector<token_id> tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  encode_into(text, true, parse_special, &out);  // SPM: a space prefix at the start
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::vector<token_id> tokenizer::encode_continuation(std::string_view text, bool after_special,
                                                     bool parse_special) const {
  std::vector<token_id> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, after_special, parse_special, &out);
  return out;
}

bool tokenizer::is_special_match(token_id id) const {
  if (id < 0 || id >= n_vocab()) return false;
  return types_[size_t(id)] == agentq::token_type::control || types_[size_t(id)] == agentq::token_type::user_defined;
}

// The text's special-token matches in order (on_special(id)) and the non-empty text between them
// (on_text(fragment)), as encode() splits it: candidates longest first, lstrip / rstrip attributes.
template <class OnText, class OnSpecial>
void tokenizer::scan_specials(std::string_view text, bool parse_special, OnText&& on_text,
                              OnSpecial&& on_special) const {
  size_t frag_begin = 0;
  if (parse_special || has_user_defined_) {
    for (size_t pos = 0; pos < text.size();) {
      token_id hit = -1;
      for (token_id id : special_by_byte_[static_cast<uint8_t>(text[pos])]) {
        if (!parse_special && types_[id] != agentq::token_type::user_defined) continue;
        const std::string& t = texts_[id];
        if (text.compare(pos, t.size(), t) == 0) {
          hit = id;  // candidates are longest first
          break;
        }
      }
      if (hit < 0) {
        ++pos;
        continue;
      }
      std::string_view left = text.substr(frag_begin, pos - frag_begin);
      if (attrs_[hit] & attr_lstrip) {
        while (!left.empty() && is_space(left.back())) left.remove_suffix(1);
      }
      if (!left.empty()) on_text(left);
      on_special(hit);
      pos += texts_[hit].size();
      if (attrs_[hit] & attr_rstrip) {
        while (pos < text.size() && is_space(text[pos])) ++pos;
      }
      frag_begin = pos;
    }
  }
  if (frag_begin < text.size()) on_text(text.substr(frag_begin));
}

void tokenizer::encode_into(std::string_view text, bool prev_special, bool parse_special,
                            std::vector<token_id>* out) const {
  // SPM: a space prefix at the start of a fragment after a special token (prev_special)
  scan_specials(
      text, parse_special,
      [&](std::string_view frag) {
        encode_fragment(frag, prev_special, out);
        prev_special = false;
      },
      [&](token_id id) {
        out->push_back(id);
        prev_special = true;
      });
}

// NOTE: why it holds: a BPE word starts as one symbol per byte and merges only shrink it; an SPM
// fragment is escaped first (a space becomes the 3-byte '▁', the prefix adds one) and every token it
// becomes is one merged symbol of at least one character or a byte fallback of one byte of it.
size_t tokenizer::max_tokens(std::string_view text, bool add_special, bool parse_special) const {
  size_t n = size_t(add_special && add_bos_ && bos_ >= 0) + size_t(add_special && add_eos_ && eos_ >= 0);
  bool prev_special = true;  // encode(): a space prefix at the start
  scan_specials(
      text, parse_special,
      [&](std::string_view frag) {
        n += frag.size();
        if (kind_ == vocab_kind::spm) {
          n += (k_space_marker.size() - 1) * size_t(std::count(frag.begin(), frag.end(), ' '));
          if (add_space_prefix_ && prev_special) n += k_space_marker.size();
        }
        prev_special = false;
      },
      [&](token_id) {
        ++n;
        prev_special = true;
      });
  return n;
}

void tokenizer::encode_fragment(std::string_view text, bool space_prefix, std::vector<token_id>* out) const {
  if (kind_ == vocab_kind::bpe) {
    encode_bpe(text, out);
    return;
  }
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + 3);
  if (add_space_prefix_ && space_prefix) escaped.append(k_space_marker);
  for (char c : text) {
    if (c == ' ') escaped.append(k_space_marker);
    else escaped.push_back(c);
  }
  encode_spm(escaped, out);
}

std::string tokenizer::make_piece(token_id id, bool special) const {
  const std::string& text = texts_[id];
  switch (types_[id]) {
    case agentq::token_type::control:
    case agentq::token_type::unknown:
      return special ? text : std::string();
    case agentq::token_type::user_defined:
      return text;
    case agentq::token_type::byte:
      if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
        return std::string(1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
      }
      return text;
    case agentq::token_type::normal:
      break;
    default:  // unused, undefined
      return std::string();
  }
  std::string out;
  out.reserve(text.size());
  if (kind_ == vocab_kind::spm) {
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, k_space_marker.size(), k_space_marker) == 0) {
        out.push_back(' ');
        i += k_space_marker.size();
      } else {
        out.push_back(text[i++]);
      }
    }
    return out;
  }
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    const uint32_t cp = unicode::decode_utf8(text, i, &len);
    const int b = unicode::cpt_to_byte(cp);
    if (b >= 0) out.push_back(static_cast<char>(b));
    else out.append(text, i, len);  // not a byte image: keep the character itself
    i += len;
  }
  return out;
}

std::string tokenizer::token_to_piece(token_id id, bool special) const {
  if (id < 0 || id >= n_vocab()) return std::string();
  return special ? make_piece(id, true) : pieces_[id];
}

std::string tokenizer::decode(std::span<const token_id> ids, bool special) const {
  std::string out;
  bool strip_space = kind_ == vocab_kind::spm && add_space_prefix_;
  for (token_id id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    const std::string& piece = special ? make_piece(id, true) : pieces_[id];
    if (piece.empty()) continue;
    if (strip_space && piece[0] == ' ') out.append(piece, 1, std::string::npos);
    else out.append(piece);
    strip_space = false;
  }
  return out;
}

}  // namespace agentq
