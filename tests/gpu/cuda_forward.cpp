// The CUDA forward pass (engine/backend/cuda_forward) against the CPU model on the
// shared tiny model: a batched prefill (one sequence mid-context), then decode steps,
// logits within 2e-3 of the CPU's (relative to the row's largest logit).
// Exits 77 (skipped) without a device, without CUDA, or without the tiny model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "test_env.h"

#if AGENTQ_HAVE_CUDA

#include "backend/cuda_forward.h"
#include "cuda_test_data.h"
#include "gguf/reader.h"
#include "kv/kv_store.h"
#include "model/model.h"

using namespace agentq;

namespace {

// The tiny model, or exit 77 (skipped) without a device or the file.
std::shared_ptr<const gguf::file> open_tiny_or_skip() {
  if (kernels::cuda::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device: skipped\n");
    std::exit(77);
  }
  // ../shared beside the checkout, or shared/ inside it (as a device machine's copy has it).
  std::filesystem::path path = test::tiny_model();
  if (!std::filesystem::exists(path)) path = test::source_dir() / "shared" / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "%s missing: skipped\n", test::tiny_model().string().c_str());
    std::exit(77);
  }
  std::string err;
  std::shared_ptr<const gguf::file> file = gguf::file::open(path.string(), &err);
  REQUIRE_MESSAGE(file, err);
  return file;
}

}  // namespace

TEST_CASE("cuda_forward matches the CPU model on the tiny model") {
  std::shared_ptr<const gguf::file> file = open_tiny_or_skip();
  std::string err;
  auto cpu = model::load(file, 2, &err);
  REQUIRE_MESSAGE(cpu, err);
  const int32_t bs = 16, n_blocks = 64;
  auto gpu = cuda_forward::create(file, bs, n_blocks, &err);
  REQUIRE_MESSAGE(gpu, err);
  kv_store kv(cpu->kv_layout_for(bs, kv_dtype::f32), n_blocks);  // the CUDA blocks are F32
  const int32_t n_vocab = cpu->hparams().n_vocab;

  // Two sequences with disjoint blocks; seq 1 prefills in two chunks (the second mid-context).
  std::vector<int32_t> table0 = {0, 1, 2, 3}, table1 = {10, 11, 12, 13};
  std::vector<token_id> prompt0, prompt1;
  for (int i = 0; i < 21; ++i) prompt0.push_back(1 + (i * 37) % (n_vocab - 1));
  for (int i = 0; i < 30; ++i) prompt1.push_back(1 + (i * 11 + 5) % (n_vocab - 1));

  auto compare = [&](std::vector<batch_seq> seqs, const char* what) {
    std::vector<float> a(size_t(64) * n_vocab), b(a.size());
    const int32_t ra = cpu->forward(seqs, kv, a.data());
    const int32_t rb = gpu->forward(seqs, b.data());
    REQUIRE(ra == rb);
    for (int32_t r = 0; r < ra; ++r)
      CHECK_MESSAGE(test::rel_err(b.data() + size_t(r) * n_vocab, a.data() + size_t(r) * n_vocab, size_t(n_vocab)) <
                        2e-3,
                    what, " row ", r);
  };
  compare({batch_seq{table0.data(), 0, prompt0.data(), 21, true}, batch_seq{table1.data(), 0, prompt1.data(), 12, false}},
          "prefill");
  compare({batch_seq{table1.data(), 12, prompt1.data() + 12, 18, true}}, "prefill after 12 cached");
  std::vector<token_id> next = {7, 9};
  for (int step = 0; step < 4; ++step) {
    compare({batch_seq{table0.data(), 21 + step, &next[0], 1, false},
             batch_seq{table1.data(), 30 + step, &next[1], 1, false}},
            "decode");
    next[0] = (next[0] * 5 + 3) % n_vocab;
    next[1] = (next[1] * 7 + 1) % n_vocab;
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

TEST_CASE("a graphed decode step gives bitwise the logits of direct launches") {
  std::shared_ptr<const gguf::file> file = open_tiny_or_skip();
  std::string err;
  const int32_t bs = 16, n_blocks = 64;
  auto graphed = cuda_forward::create(file, bs, n_blocks, &err);
  REQUIRE_MESSAGE(graphed, err);
  ::setenv("AGENTQ_CUDA_GRAPHS", "0", 1);
  auto direct = cuda_forward::create(file, bs, n_blocks, &err);
  ::unsetenv("AGENTQ_CUDA_GRAPHS");
  REQUIRE_MESSAGE(direct, err);
  const int32_t n_vocab = graphed->hparams().n_vocab;

  std::vector<int32_t> table0 = {0, 1, 2, 3, 4}, table1 = {10, 11, 12, 13, 14};
  std::vector<token_id> prompt(21);
  for (int i = 0; i < 21; ++i) prompt[size_t(i)] = 1 + (i * 37) % (n_vocab - 1);
  std::vector<float> a(size_t(2) * n_vocab), b(a.size());
  const std::vector<batch_seq> prefill = {batch_seq{table0.data(), 0, prompt.data(), 21, false},
                                          batch_seq{table1.data(), 0, prompt.data(), 13, false}};
  REQUIRE(graphed->forward(prefill, a.data()) == 2);
  REQUIRE(direct->forward(prefill, b.data()) == 2);
  // Decode steps cross block boundaries; the batch shrinks from two sequences to one and back.
  token_id t0 = 5, t1 = 9;
  int32_t len1 = 13;  // sequence 1 sits out steps 10-19 (a job waiting on a tool)
  for (int step = 0; step < 40; ++step) {
    std::vector<batch_seq> seqs = {batch_seq{table0.data(), 21 + step, &t0, 1, false}};
    if (step < 10 || step >= 20) seqs.push_back(batch_seq{table1.data(), len1++, &t1, 1, false});
    const int32_t ra = graphed->forward(seqs, a.data());
    const int32_t rb = direct->forward(seqs, b.data());
    REQUIRE(ra == int32_t(seqs.size()));
    REQUIRE(rb == ra);
    CHECK_MESSAGE(std::memcmp(a.data(), b.data(), size_t(ra) * n_vocab * 4) == 0, "step ", step);
    t0 = token_id(std::max_element(a.begin(), a.begin() + n_vocab) - a.begin());
    t1 = (t1 * 7 + 1) % n_vocab;
  }
  // One capture per batch shape (2, 1, 2 sequences): the rest replays or updates in place.
  CHECK(graphed->graph_captures() >= 1);
  CHECK(graphed->graph_captures() <= 3);
  CHECK(direct->graph_captures() == 0);
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

#else

TEST_CASE("cuda_forward: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
