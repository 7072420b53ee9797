// Copy a GGUF file with some vocabulary entries replaced (text and token type): how
// tests get a real vocabulary, or the tiny model, with control tokens such as
// Mistral's [TOOL_CALLS] or Llama's <|python_tag|>, which the shared files lack.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace agentq::test {

struct token_edit {
  int32_t id;
  std::string text;
  int32_t type;  // tokenizer.ggml.token_type value: 3 = control, 4 = user-defined
};

// false with *error on failure. Tensors are copied unchanged.
inline bool copy_gguf_with_tokens(const std::string& src, const std::string& dst, const std::vector<token_edit>& edits,
                                  std::string* error) {
  auto f = gguf::file::open(src, error);
  if (!f) return false;
  gguf::writer w;
  for (const auto& [key, val] : f->metadata()) {
    if (key == "general.alignment") continue;  // the writer uses its own
    if (key == "tokenizer.ggml.tokens") {
      std::vector<std::string> texts(val.strs.begin(), val.strs.end());
      for (const auto& e : edits) texts.at(size_t(e.id)) = e.text;
      w.set_strings(key, std::vector<std::string_view>(texts.begin(), texts.end()));
    } else if (key == "tokenizer.ggml.token_type") {
      std::vector<int32_t> types(val.n);
      for (uint64_t i = 0; i < val.n; ++i) types[i] = int32_t(val.at_i64(i));
      for (const auto& e : edits) types.at(size_t(e.id)) = e.type;
      w.set_array(key, gguf::value_type::i32, types.data(), types.size());
    } else {
      w.set_value(key, val);
    }
  }
  for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.dims);
  if (!w.open(dst, error)) return false;
  for (const auto& t : f->tensors())
    if (!w.write_tensor_data(t.data, t.n_bytes, error)) return false;
  return w.close(error);
}

}  // namespace agentq::test
