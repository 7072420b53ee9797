// Tokenizers against llama.cpp's vocab test vectors: the texts and llama.cpp's ids are committed
// (tests/unit/engine/data/llamacpp_vocab: models/ggml-vocab.inp and ggml-vocab-<name>.gguf.out from
// llama.cpp's tree, commit d32676d7), the vocab GGUFs (1-4 MB each) are read from
// $LLAMA_CPP_DIR/models (default: llama.cpp beside the shared dir), never copied here: exact ids for
// the pre-tokenizers we implement (starcoder, refact, falcon, deepseek-coder, deepseek-llm, mpt) (#25);
// the families' own vocabularies: unit.tokenizer_family_vocab. Skipped (77) without the GGUFs.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "gguf/reader.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

// NOTE: llama.cpp lives beside the checkout, as ../shared does (DEVELOPERS.md).
fs::path models_dir() {
  const std::string dir = test::env_or("LLAMA_CPP_DIR", "");
  return (dir.empty() ? test::shared_dir() / ".." / "llama.cpp" : fs::path(dir)) / "models";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("llama.cpp's vocab vectors: exact ids") {
  // NOTE: the families' own vocabularies (qwen2, gemma, gpt-4o/o200k) are not in llama.cpp's tree
  // as .gguf (only their .inp/.out), so these are the BPE pre-tokenizers whose vocabularies are.
  const char* supported[] = {"starcoder", "refact", "falcon", "deepseek-coder", "deepseek-llm", "mpt"};
  int n_found = 0;
  const fs::path vectors = test::source_dir() / "tests" / "unit" / "engine" / "data" / "llamacpp_vocab";
  const std::string all = slurp(vectors / "ggml-vocab.inp"), sep = "\n__ggml_vocab_test__\n";
  REQUIRE(!all.empty());
  std::vector<std::string> texts;
  for (size_t b = 0, at; (at = all.find(sep, b)) != std::string::npos; b = at + sep.size()) texts.push_back(all.substr(b, at - b));
  REQUIRE(texts.size() > 40);
  for (const char* name : supported) {
    const std::string file = "ggml-vocab-" + std::string(name) + ".gguf";
    const fs::path path = models_dir() / file;
    if (!fs::exists(path) || fs::file_size(path) < 4096) continue;  // absent, or an LFS pointer
    ++n_found;
    INFO(std::string(name));
    std::string err;
    auto f = gguf::file::open(path.string(), &err);
    REQUIRE_MESSAGE(f, err);
    auto tok = tokenizer::load(*f, &err);
    REQUIRE_MESSAGE(tok, err);
    std::ifstream out(vectors / (file + ".out"));
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
      if (tok->encode(texts[i], false, false) != want[i]) {
        ++n_fail;
        FAIL_CHECK("case " << i << " text '" << texts[i] << "'");
      }
    CHECK(n_fail == 0);
    MESSAGE(std::string(name), ": ", texts.size(), " texts tokenized as llama.cpp does");
  }
  if (n_found == 0) test::skip(models_dir().string() + ": no llama.cpp vocab files (set LLAMA_CPP_DIR)");
}
