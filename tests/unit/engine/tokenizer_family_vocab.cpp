// The families' own vocabularies against llama.cpp (#25): Qwen2/2.5/3's byte-level BPE (pre
// "qwen2"), Gemma 3's SentencePiece with byte fallback and GPT-OSS's o200k_harmony (pre "gpt-4o").
// The texts (families-vocab.inp: llama.cpp's ggml-vocab.inp plus code, tool calls, chat markers,
// scripts, digits and whitespace runs) and the reference ids for each are committed
// (tests/unit/engine/data/llamacpp_vocab/agentq-vocab-*.gguf.out, from scripts/dev/llamacpp_vocab.sh:
// llama-tokenize's ids, or without a llama.cpp build the upstream tokenizers' (Hugging Face's on
// tokenizer.json, as llama.cpp's own vectors are made; tiktoken for o200k), with .skip listing
// the texts where upstream differs from llama.cpp by design: control tokens written in the text,
// Qwen2's NFC, o200k's marks and case; from llama.cpp, .skip lists where the engine departs from it
// on purpose: gpt-oss's Harmony markers, which llama.cpp matches in text). The vocab-only GGUFs (6-8 MB each) are written by that script from the published
// tokenizer files and read from $AGENTQ_VOCAB_DIR (default ../shared/models/vocab); where a file is
// not there, its xz-compressed copy under tests/data/vocab is unpacked into a temporary directory
// (Qwen2's and o200k's are committed, each under 2 MB; Gemma 3's is not: its tokenizer's terms are
// not Apache/MIT, so that family runs only where the GGUF is supplied). Skipped (77) without any.
#include <doctest/doctest.h>

#include <fstream>

#include "temp_dir.h"
#include "test_env.h"
#include "vocab_vectors.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

fs::path vocab_dir() {
  const std::string dir = test::env_or("AGENTQ_VOCAB_DIR", "");
  return dir.empty() ? test::shared_dir() / "models" / "vocab" : fs::path(dir);
}

// The vocab GGUF for `file`: from vocab_dir(), else unpacked from tests/data/vocab/<file>.xz with
// the system's xz (empty path when neither is available).
fs::path find_vocab(const std::string& file, const test::temp_dir& tmp) {
  const fs::path direct = vocab_dir() / file;
  if (fs::exists(direct) && fs::file_size(direct) >= 4096) return direct;
  const fs::path packed = test::source_dir() / "tests" / "data" / "vocab" / (file + ".xz");
  if (!fs::exists(packed)) return {};
  const fs::path out = tmp.path() / file;
  const std::string cmd = "xz -dc '" + packed.string() + "' > '" + out.string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    MESSAGE("xz could not unpack ", packed.string());
    return {};
  }
  return out;
}

}  // namespace

TEST_CASE("the families' vocabularies tokenize as llama.cpp does") {
  const fs::path vectors = test::source_dir() / "tests" / "unit" / "engine" / "data" / "llamacpp_vocab";
  const std::vector<std::string> texts = test::read_vocab_texts(vectors / "families-vocab.inp");
  REQUIRE(texts.size() > 60);
  int n_found = 0;
  const test::temp_dir tmp;
  for (const char* name : {"qwen2", "gemma3", "gpt-oss"}) {
    const std::string file = "agentq-vocab-" + std::string(name) + ".gguf";
    const fs::path path = find_vocab(file, tmp);
    if (path.empty()) {
      MESSAGE(std::string(name), ": no ", file, " in ", vocab_dir().string(), " nor tests/data/vocab: not checked");
      continue;
    }
    ++n_found;
    INFO(std::string(name));
    std::vector<bool> skip(texts.size(), false);  // "case reason" lines (absent: none)
    std::ifstream skips(vectors / (file + ".skip"));
    int n_skip = 0;
    for (std::string line; std::getline(skips, line);) {
      const size_t i = std::stoul(line);
      REQUIRE(i < texts.size());
      skip[i] = true;
      ++n_skip;
    }
    test::check_vocab_vectors(path, texts, vectors / (file + ".out"), skip);
    MESSAGE(std::string(name), ": ", texts.size() - n_skip, " texts tokenized as the reference does (", n_skip,
            " listed in .skip)");
  }
  if (n_found == 0)
    test::skip(vocab_dir().string() + ": no agentq-vocab-*.gguf (scripts/dev/llamacpp_vocab.sh writes them)");
}
