// llama.cpp-style tokenizer test vectors (.inp texts split by "__ggml_vocab_test__", .out one line
// of ids per text), shared by unit.tokenizer_llamacpp_vocab and unit.tokenizer_family_vocab.
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"

namespace agentq::test {

// The texts of a .inp file (empty when it cannot be read).
inline std::vector<std::string> read_vocab_texts(const std::filesystem::path& inp) {
  std::ifstream in(inp, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t b = 0, at; (at = all.find(sep, b)) != std::string::npos; b = at + sep.size())
    texts.push_back(all.substr(b, at - b));
  return texts;
}

// Loads the vocab GGUF and requires its ids for every text not marked in `skip` (empty: none) to
// equal the .out file's, one FAIL_CHECK per differing text, and tokenizer::max_tokens to bound them all.
inline void check_vocab_vectors(const std::filesystem::path& gguf_path, const std::vector<std::string>& texts,
                                const std::filesystem::path& out_path, const std::vector<bool>& skip = {}) {
  std::string err;
  auto f = gguf::file::open(gguf_path.string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto tok = tokenizer::load(*f, &err);
  REQUIRE_MESSAGE(tok, err);
  std::ifstream out(out_path);
  REQUIRE(out.good());
  std::vector<std::vector<token_id>> want;
  for (std::string line; std::getline(out, line);) {
    std::istringstream ss(line);
    want.emplace_back();
    for (token_id id; ss >> id;) want.back().push_back(id);
  }
  REQUIRE(texts.size() == want.size());
  int n_fail = 0;
  for (size_t i = 0; i < texts.size(); ++i)
    if (!(i < skip.size() && skip[i]) && tok->encode(texts[i], false, false) != want[i]) {
      ++n_fail;
      FAIL_CHECK("case " << i << " text '" << texts[i] << "'");
    }
  CHECK(n_fail == 0);
  // max_tokens bounds the encoding of every text, in every mode (engine::validate skips counting on it).
  for (const auto& text : texts)
    for (bool special : {false, true}) {
      const size_t n = tok->encode(text, special, special).size();
      if (tok->max_tokens(text, special, special) < n) FAIL_CHECK("max_tokens under " << n << ": '" << text << "'");
    }
}

}  // namespace agentq::test
