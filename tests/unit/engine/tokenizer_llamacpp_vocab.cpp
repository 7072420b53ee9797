// Tokenizers against llama.cpp's vocab test vectors: the texts and llama.cpp's ids are committed
// (tests/unit/engine/data/llamacpp_vocab: models/ggml-vocab.inp and ggml-vocab-<name>.gguf.out from
// llama.cpp's tree, commit d32676d7), the vocab GGUFs (1-4 MB each) are read from
// $LLAMA_CPP_DIR/models (default: llama.cpp beside the shared dir), never copied here: exact ids for
// the pre-tokenizers we implement (starcoder, refact, falcon, deepseek-coder, deepseek-llm, mpt) (#25);
// the families' own vocabularies: unit.tokenizer_family_vocab. Skipped (77) without the GGUFs.
#include <doctest/doctest.h>

#include "test_env.h"
#include "vocab_vectors.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

// NOTE: llama.cpp lives beside the checkout, as ../shared does (DEVELOPERS.md).
fs::path models_dir() {
  const std::string dir = test::env_or("LLAMA_CPP_DIR", "");
  return (dir.empty() ? test::shared_dir() / ".." / "llama.cpp" : fs::path(dir)) / "models";
}

}  // namespace

TEST_CASE("llama.cpp's vocab vectors: exact ids") {
  // NOTE: the families' own vocabularies (qwen2, gemma, gpt-4o/o200k) are not in llama.cpp's tree
  // as .gguf (only their .inp/.out), so these are the BPE pre-tokenizers whose vocabularies are.
  const char* supported[] = {"starcoder", "refact", "falcon", "deepseek-coder", "deepseek-llm", "mpt"};
  int n_found = 0;
  const fs::path vectors = test::source_dir() / "tests" / "unit" / "engine" / "data" / "llamacpp_vocab";
  const std::vector<std::string> texts = test::read_vocab_texts(vectors / "ggml-vocab.inp");
  REQUIRE(texts.size() > 40);
  for (const char* name : supported) {
    const std::string file = "ggml-vocab-" + std::string(name) + ".gguf";
    const fs::path path = models_dir() / file;
    if (!fs::exists(path) || fs::file_size(path) < 4096) continue;  // absent, or an LFS pointer
    ++n_found;
    INFO(std::string(name));
    test::check_vocab_vectors(path, texts, vectors / (file + ".out"));
    MESSAGE(std::string(name), ": ", texts.size(), " texts tokenized as llama.cpp does");
  }
  if (n_found == 0) test::skip(models_dir().string() + ": no llama.cpp vocab files (set LLAMA_CPP_DIR)");
}
