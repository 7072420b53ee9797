// Every registered architecture on the CUDA backend, run from the same layer_stack as the CPU
// (describe_model): on each family's synthetic parity model (gguf/synthetic.cpp, seed 25) the GPU
// gives llama.cpp's greedy tokens (tests/unit/engine/data/families/<arch>.jsonl) and the CPU engine's
// tokens and logits, batched prompts longer than the sliding windows, prefill in chunks, then decode;
// a graphed decode step gives the direct launches' bits for the families with new ops (soft-caps,
// windows, sinks, MoE); a family the registry does not mark cuda is refused by name.
// Exits 77 (skipped) without a device, without CUDA, or without the vocab for the models.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "test_env.h"

#if AGENTQ_HAVE_CUDA

#include "agentq/kernels_cuda.h"
#include "backend/cuda_forward.h"
#include "cuda_ref_forward.h"
#include "gguf/reader.h"
#include "gguf/synthetic.h"
#include "golden_json.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "model/registry.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

// NOTE: the seed of scripts/dev/llamacpp_families.sh (the reference data's models), as model_families.cpp
constexpr uint64_t k_seed = 25;
constexpr int32_t k_block_size = 16;
// As the CPU parity test: a token may differ only at a near tie of the reference's own logits.
constexpr float k_near_tie = 5e-3f;

fs::path vocab_or_skip() {
  if (kernels::cuda::device_count() == 0) test::skip("no CUDA device");
  fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) vocab = test::source_dir() / "shared" / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing");
  return vocab;
}

std::shared_ptr<const gguf::file> parity_model(const std::string& arch, const fs::path& vocab) {
  const fs::path dir = fs::temp_directory_path() / ("agentq_cuda_families_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / (arch + ".gguf");
  std::string err;
  REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(arch, k_seed, vocab.string()), path.string(), nullptr, &err),
                  err);
  std::shared_ptr<const gguf::file> f = gguf::file::open(path.string(), &err);
  REQUIRE_MESSAGE(f, err);
  fs::remove(path);  // the mapping keeps the data
  return f;
}

// Top-5 logits within this of llama.cpp's and the CPU engine's (the CUDA K/V is F32, llama.cpp's F16).
// gpt-oss: its MXFP4 experts' activations are rounded to Q8_0 by llama.cpp and the CPU engine, not by
// the CUDA matvec: the references of these ops differ from the CPU engine by 0.030 on this model
// (unit.cuda_reference_forward), the CPU engine from llama.cpp by up to 0.015.
float logit_tol(const std::string& arch) {
  return arch == "gpt-oss" ? 5e-2f : 1e-2f;
}
// A row further from the CPU engine's than logit_tol is checked against the CUDA ops' references
// (test::cuda_ref::ref_forward, the same ops on the CPU without the CPU engine's Q8_0 rounding of
// gpt-oss's MXFP4 activations): the device must give their logits within this.
// NOTE: why: on the first H200 run, gpt-oss's batched decode differed from the CPU engine by 0.69983 at
// one step (sequence b, step 14; a MoE router's choice moved by that rounding), and the references on
// the CPU differ from the CPU engine there by the same 0.69983: the device computes its ops correctly.
constexpr float k_ref_tol = 2e-3f;

token_id argmax(const float* v, int32_t n) {
  token_id best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;  // ties: lowest id
  return best;
}

// The largest and second largest of a row.
std::pair<float, float> top2(const float* v, int32_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    if (v[i] > a)
      b = a, a = v[i];
    else if (v[i] > b)
      b = v[i];
  }
  return {a, b};
}

}  // namespace

TEST_CASE("cuda runs every registered architecture: llama.cpp's greedy tokens on its parity model") {
  const fs::path vocab = vocab_or_skip();
  for (const auto& arch : gguf::synthetic_archs()) {
    CAPTURE(arch);
    auto f = parity_model(arch, vocab);
    auto cases =
        test::load_golden(test::source_dir() / "tests" / "unit" / "engine" / "data" / "families" / (arch + ".jsonl"));
    REQUIRE(cases.size() >= 2);
    int32_t n_checked = 0;
    float worst = 0;
    std::string err;
    for (const auto& c : cases) {
      const int32_t n_total = int32_t(c.prompt_ids.size() + c.output_ids.size());
      const int32_t n_blocks = (n_total + k_block_size - 1) / k_block_size;
      auto m = cuda_forward::create(f, k_block_size, n_blocks, &err);
      REQUIRE_MESSAGE(m, err);
      const int32_t n_vocab = m->hparams().n_vocab;
      std::vector<int32_t> table(static_cast<size_t>(n_blocks));
      for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = i;
      std::vector<float> logits(static_cast<size_t>(n_vocab));
      batch_seq s;
      s.block_table = table.data();
      s.tokens = c.prompt_ids.data();
      s.n_tokens = int32_t(c.prompt_ids.size());
      REQUIRE(m->forward({&s, 1}, logits.data()) == 1);
      int32_t n_past = s.n_tokens;
      for (size_t step = 0; step < c.output_ids.size(); ++step) {
        CAPTURE(step);
        for (const auto& [id, w] : c.top5[step]) {
          const float diff = std::fabs(logits[size_t(id)] - w);
          worst = std::max(worst, diff);
          CHECK_MESSAGE(diff <= logit_tol(arch), "logit of token ", id, ": got ", logits[size_t(id)], ", want ", w);
        }
        const token_id got = argmax(logits.data(), n_vocab);
        if (got != c.output_ids[step]) {
          const float gap = c.top5[step][0].second - c.top5[step][1].second;
          REQUIRE_MESSAGE(gap < k_near_tie, "token mismatch at step ", step, ": got ", got, ", want ",
                          c.output_ids[step]);
          break;
        }
        ++n_checked;
        token_id next = c.output_ids[step];
        s.tokens = &next;
        s.n_tokens = 1;
        s.n_past = n_past++;
        REQUIRE(m->forward({&s, 1}, logits.data()) == 1);
      }
    }
    MESSAGE(arch, " on cuda: ", n_checked, " greedy tokens equal to llama.cpp's; largest top-5 logit difference ",
            worst);
    CHECK(n_checked >= 32);
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

TEST_CASE("cuda gives the CPU engine's greedy tokens and logits, batched, past the sliding windows") {
  const fs::path vocab = vocab_or_skip();
  for (const auto& arch : gguf::synthetic_archs()) {
    CAPTURE(arch);
    auto f = parity_model(arch, vocab);
    std::string err;
    auto cpu = model::load(f, 2, &err);
    REQUIRE_MESSAGE(cpu, err);
    constexpr int32_t n_blocks_seq = 8;  // 128 positions a sequence
    auto gpu = cuda_forward::create(f, k_block_size, 2 * n_blocks_seq, &err);
    REQUIRE_MESSAGE(gpu, err);
    kv_store kv(cpu->kv_layout_for(k_block_size, kv_dtype::f32), 2 * n_blocks_seq);  // the CUDA blocks are F32
    const int32_t n_vocab = cpu->hparams().n_vocab;
    std::vector<int32_t> ta(n_blocks_seq), tb(n_blocks_seq);
    for (int32_t i = 0; i < n_blocks_seq; ++i) ta[size_t(i)] = i, tb[size_t(i)] = n_blocks_seq + i;
    // Prompts longer than the synthetic models' windows (8): a in chunks of 11 beside b whole.
    std::vector<token_id> a, b;
    for (int32_t i = 0; i < 33; ++i) a.push_back(token_id(100 + 37 * i));
    for (int32_t i = 0; i < 20; ++i) b.push_back(token_id(5000 + 101 * i));
    std::vector<float> lc(size_t(64) * n_vocab), lg(lc.size());
    // The CUDA ops' references, one per sequence, fed the same tokens (their rows in the batch's order).
    const weight_store views;  // as cuda_forward: the file's bytes and types
    layer_stack desc;
    REQUIRE_MESSAGE(describe_model(*f, views, &desc, &err), err);
    test::cuda_ref::ref_forward ref_a(desc, n_blocks_seq, k_block_size), ref_b(desc, n_blocks_seq, k_block_size);
    float worst = 0, worst_ref = 0;
    int32_t n_via_ref = 0;
    auto compare = [&](const std::vector<batch_seq>& seqs, const std::vector<test::cuda_ref::ref_forward*>& refs,
                       const std::string& what) {
      const int32_t rc = cpu->forward(seqs, kv, lc.data());
      const int32_t rg = gpu->forward(seqs, lg.data());
      REQUIRE(rc == rg);
      std::vector<float> lr;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const batch_seq& q = seqs[i];
        const auto rows = refs[i]->forward({q.tokens, q.tokens + q.n_tokens}, q.n_past, nullptr, nullptr, q.all_logits);
        lr.insert(lr.end(), rows.begin(), rows.end());
      }
      REQUIRE(lr.size() == size_t(rc) * n_vocab);
      for (int32_t r = 0; r < rc; ++r) {
        CAPTURE(what);
        CAPTURE(r);
        const float* c = lc.data() + size_t(r) * n_vocab;
        const float* g = lg.data() + size_t(r) * n_vocab;
        const float* e = lr.data() + size_t(r) * n_vocab;
        float d = 0, d_ref = 0, d_ref_cpu = 0;
        for (int32_t i = 0; i < n_vocab; ++i) {
          d = std::max(d, std::fabs(c[i] - g[i]));
          d_ref = std::max(d_ref, std::fabs(e[i] - g[i]));
          d_ref_cpu = std::max(d_ref_cpu, std::fabs(e[i] - c[i]));
        }
        worst = std::max(worst, d);
        worst_ref = std::max(worst_ref, d_ref);
        // Logits within tol of each other can swap a top-2 gap below 2 tol.
        if (d <= logit_tol(arch)) {
          const auto [t1, t2] = top2(c, n_vocab);
          if (t1 - t2 >= std::max(k_near_tie, 2 * logit_tol(arch))) CHECK(argmax(g, n_vocab) == argmax(c, n_vocab));
          continue;
        }
        // Further from the CPU engine: where the references differ from it as much, the device must give theirs.
        ++n_via_ref;
        MESSAGE(arch, " ", what, " row ", r, ": cuda vs cpu ", d, "; references vs cpu ", d_ref_cpu,
                ", cuda vs references ", d_ref);
        CHECK(d_ref <= k_ref_tol);
        const auto [t1, t2] = top2(e, n_vocab);
        if (t1 - t2 >= std::max(k_near_tie, 2 * k_ref_tol)) CHECK(argmax(g, n_vocab) == argmax(e, n_vocab));
      }
    };
    compare({batch_seq{ta.data(), 0, a.data(), 11, true}, batch_seq{tb.data(), 0, b.data(), 20, false}},
            {&ref_a, &ref_b}, "prefill");
    compare({batch_seq{ta.data(), 11, a.data() + 11, 11, true}}, {&ref_a}, "prefill chunk 2");
    compare({batch_seq{ta.data(), 22, a.data() + 22, 11, false}}, {&ref_a}, "prefill chunk 3");
    // Greedy decode of both sequences from the CPU's tokens (the same inputs either way).
    token_id na = argmax(lc.data(), n_vocab), nb = 7;
    for (int32_t step = 0; step < 40; ++step) {
      compare({batch_seq{ta.data(), 33 + step, &na, 1, false}, batch_seq{tb.data(), 20 + step, &nb, 1, false}},
              {&ref_a, &ref_b}, "decode step " + std::to_string(step));
      na = argmax(lc.data(), n_vocab);
      nb = argmax(lc.data() + n_vocab, n_vocab);
    }
    MESSAGE(arch, ": cuda vs cpu largest logit difference ", worst, " (", n_via_ref,
            " rows past the tolerance checked against the references); cuda vs the references ", worst_ref);
    // Only gpt-oss's rounding is known to leave the tolerance, and rarely.
    CHECK(n_via_ref <= (arch == "gpt-oss" ? 8 : 0));
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

TEST_CASE("a graphed decode step gives the direct launches' bits for the families with new ops") {
  const fs::path vocab = vocab_or_skip();
  for (const char* arch : {"gemma2", "gemma3", "qwen3moe", "gpt-oss", "phi3", "smollm3"}) {
    CAPTURE(arch);
    auto f = parity_model(arch, vocab);
    std::string err;
    auto graphed = cuda_forward::create(f, k_block_size, 16, &err);
    REQUIRE_MESSAGE(graphed, err);
    ::setenv("AGENTQ_CUDA_GRAPHS", "0", 1);
    auto direct = cuda_forward::create(f, k_block_size, 16, &err);
    ::unsetenv("AGENTQ_CUDA_GRAPHS");
    REQUIRE_MESSAGE(direct, err);
    const int32_t n_vocab = graphed->hparams().n_vocab;
    std::vector<int32_t> t0 = {0, 1, 2, 3, 4, 5, 6, 7}, t1 = {8, 9, 10, 11, 12, 13, 14, 15};
    std::vector<token_id> prompt(21);
    for (int32_t i = 0; i < 21; ++i) prompt[size_t(i)] = 1 + (i * 37) % (n_vocab - 1);
    std::vector<float> a(size_t(2) * n_vocab), b(a.size());
    const std::vector<batch_seq> prefill = {batch_seq{t0.data(), 0, prompt.data(), 21, false},
                                            batch_seq{t1.data(), 0, prompt.data(), 13, false}};
    REQUIRE(graphed->forward(prefill, a.data()) == 2);
    REQUIRE(direct->forward(prefill, b.data()) == 2);
    token_id x0 = 5, x1 = 9;
    for (int32_t step = 0; step < 30; ++step) {
      const std::vector<batch_seq> seqs = {batch_seq{t0.data(), 21 + step, &x0, 1, false},
                                           batch_seq{t1.data(), 13 + step, &x1, 1, false}};
      REQUIRE(graphed->forward(seqs, a.data()) == 2);
      REQUIRE(direct->forward(seqs, b.data()) == 2);
      CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0, "step ", step);
      x0 = argmax(a.data(), n_vocab);
      x1 = argmax(a.data() + n_vocab, n_vocab);
    }
    CHECK(graphed->graph_captures() >= 1);
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

TEST_CASE("cuda refuses the architectures the registry does not mark for it, by name") {
  const fs::path vocab = vocab_or_skip();
  int32_t n_refused = 0;
  for (const auto& a : architectures()) {
    if (a.cuda) continue;
    CAPTURE(a.name);
    auto f = parity_model(a.name, vocab);
    std::string err;
    CHECK(cuda_forward::create(f, 16, 8, &err) == nullptr);
    CHECK(err == "architecture " + std::string(a.name) + " not supported on cuda yet (run it with device=cpu)");
    ++n_refused;
  }
  MESSAGE(n_refused, " registered architectures refused on cuda (every other one runs there)");
}

#else

TEST_CASE("cuda families: built without CUDA") {
  test::skip("built without CUDA");
}

#endif
