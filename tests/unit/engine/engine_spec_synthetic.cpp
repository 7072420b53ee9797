// Speculative decoding (#32) on a synthetic model written by agentq-mkgguf (llama and qwen2,
// Q8_0, a 32k vocab): greedy output is token-identical with and without prompt lookup,
// solo and batched, on prompts that repeat themselves. Exits 77 when agentq-mkgguf is not built.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "engine_impl.h"
#include "golden.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

TEST_CASE("spec: synthetic llama and qwen2 models decode identically with speculation") {
  const fs::path bin = test::bin_dir() / "agentq-mkgguf";
  if (!fs::exists(bin)) test::skip(bin.string() + " not built (build the agentq-mkgguf target)");
  const fs::path dir = fs::temp_directory_path() / ("agentq_spec_synth_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* arch : {"llama", "qwen2"}) {
    const fs::path path = dir / (std::string(arch) + ".gguf");
    const std::string cmd = bin.string() + " --out " + path.string() + " --shape tiny --type q8_0 --seed 3 --arch " + arch +
                            " --vocab " + (test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string() + " > /dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::vector<token_request> reqs;
    for (int i = 0; i < 6; ++i) {
      std::vector<token_id> base;
      for (int j = 0; j < 24; ++j) base.push_back(token_id(100 + (j * 131 + i * 977) % 30000));
      std::vector<token_id> p = base;
      p.insert(p.end(), base.begin(), base.end());        // a text quoted twice: lookup proposes its tail
      p.insert(p.end(), base.begin(), base.begin() + 6);
      reqs.push_back(test::greedy(p, 48));
    }
    std::vector<std::vector<token_id>> want;
    {
      engine_config c = test::tiny_config();
      c.model_path = path.string();
      c.spec = false;
      auto off = test::load_as<engine_impl>(c);
      for (const auto& r : reqs) want.push_back(test::run_one(*off, r).output_ids);
    }
    engine_config c = test::tiny_config();
    c.model_path = path.string();
    auto on = test::load_as<engine_impl>(c);
    int64_t proposed = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto r = test::run_one(*on, reqs[i]);
      CHECK_MESSAGE(r.output_ids == want[i], std::string(arch) << " solo " << i);
      proposed += r.usage.n_tokens_draft_accepted + r.usage.n_tokens_draft_rejected;
    }
    auto res = test::run_all(*on, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK_MESSAGE(res[i].output_ids == want[i], std::string(arch) << " batched " << i);
    MESSAGE(std::string(arch) << ": proposed " << proposed << ", accepted " << on->stats().n_tokens_draft_accepted);
    CHECK(proposed > 0);  // the check above compared something speculative
  }
  fs::remove_all(dir);
}
