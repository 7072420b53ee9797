// The copy model (agentq-mkgguf --shape 110m-copy, Q8_0: induction heads over small random weights,
// gguf/copy_circuit.h) rewrites what it reads, which the speculation benchmark's repetitive
// workload relies on: greedy decoding copies a passage from its prompt, prompt lookup's
// proposals are then mostly accepted, and the output is token-identical with and without
// speculation, solo and batched. Exits 77 when agentq-mkgguf is not built.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "engine_impl.h"
#include "golden.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

// Of out's tokens, how many continue an earlier occurrence of the three tokens before them
// (in prompt + out so far): what a model copying its context emits.
int n_copied(const std::vector<token_id>& prompt, const std::vector<token_id>& out) {
  std::vector<token_id> ctx = prompt;
  int hit = 0;
  for (token_id t : out) {
    const size_t L = ctx.size();
    for (size_t j = 3; j < L; ++j)
      if (ctx[j] == t && std::equal(ctx.begin() + long(j) - 3, ctx.begin() + long(j), ctx.end() - 3)) {
        ++hit;
        break;
      }
    ctx.push_back(t);
  }
  return hit;
}

struct copy_model {
  fs::path dir, path;
  copy_model(const std::string& shape, const std::string& type) {
    const fs::path bin = test::bin_dir() / "agentq-mkgguf";
    if (!fs::exists(bin)) test::skip(bin.string() + " not built (build the agentq-mkgguf target)");
    dir = fs::temp_directory_path() / ("agentq_spec_copy_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    path = dir / (shape + "-" + type + ".gguf");
    const std::string cmd = bin.string() + " --out " + path.string() + " --shape " + shape + " --type " + type +
                            " --threads 2 --vocab " + (test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string() +
                            " > /dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  ~copy_model() { fs::remove_all(dir); }
};

constexpr size_t seed_len = 10;  // tokens of the seed with BOS

// seed + passage + seed: the turn continues with the passage (as bench_spec's repetitive workload).
std::vector<token_id> rewrite_prompt(engine& e, int start, int n) {
  std::ifstream f(test::source_dir() / "engine/spec/ngram_proposer.cpp");
  REQUIRE(f);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto all = e.tokenize(ss.str(), false, false);
  REQUIRE(all.size() >= size_t(start + n));
  const auto seed = e.tokenize("Once upon a time, there was a little", true, false);
  REQUIRE(seed.size() == seed_len);
  std::vector<token_id> p = seed;
  p.insert(p.end(), all.begin() + start, all.begin() + start + n);
  p.insert(p.end(), seed.begin(), seed.end());
  return p;
}

}  // namespace

TEST_CASE("spec: the copy model copies a passage, and speculation on it is exact") {
  copy_model m("110m-copy", "q8_0");
  engine_config c = test::tiny_config();
  c.model_path = m.path.string();
  c.kv_budget_bytes = 64ull << 20;
  c.spec = false;
  auto off = test::load_as<engine_impl>(c);
  std::vector<token_request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(test::greedy(rewrite_prompt(*off, 40 * i, 300), 128));
  std::vector<std::vector<token_id>> want;
  for (const auto& r : reqs) {
    want.push_back(test::run_one(*off, r).output_ids);
    // the premise: the output is (mostly) the passage, copied from the prompt
    const int n = n_copied(r.prompt, want.back());
    const auto& o = want.back();
    MESSAGE("copied " << n << " of " << o.size());
    CHECK(n >= int(o.size()) * 9 / 10);
    // ... and not a loop over a few lines of it: the output's trigrams are mostly distinct
    // (the passage itself repeats some, e.g. "params_."; a loop, as 15m-copy's, gives < 0.5)
    std::set<std::array<token_id, 3>> tri;
    for (size_t k = 2; k < o.size(); ++k) tri.insert({o[k - 2], o[k - 1], o[k]});
    MESSAGE("distinct trigrams " << tri.size() << " of " << o.size() - 2);
    CHECK(tri.size() >= (o.size() - 2) * 7 / 10);
    // ... and it starts as the passage does (the prompt's last tokens match the passage's start)
    CHECK(std::equal(o.begin(), o.begin() + 8, r.prompt.begin() + long(seed_len)));
  }
  c.spec = true;
  auto on = test::load_as<engine_impl>(c);
  int64_t accepted = 0, generated = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto r = test::run_one(*on, reqs[i]);
    CHECK_MESSAGE(r.output_ids == want[i], "solo " << i);
    accepted += r.usage.n_tokens_draft_accepted;
    generated += r.usage.n_tokens_generated;
  }
  auto res = test::run_all(*on, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK_MESSAGE(res[i].output_ids == want[i], "batched " << i);
  MESSAGE("accepted " << accepted << " of " << generated << " generated");
  CHECK(accepted * 10 >= generated * 7);  // lookup finds the rewrite: most tokens come from proposals
}
