// The CUDA forward pass (engine/backend/cuda_forward) against the CPU model on the
// shared tiny model: a batched prefill (one sequence mid-context), then decode steps,
// logits within 2e-3 of the CPU's (relative to the row's largest logit).
// Exits 77 (skipped) without a device, without CUDA, or without the tiny model.
#include <doctest/doctest.h>

#include <cstdio>
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

TEST_CASE("cuda_forward matches the CPU model on the tiny model") {
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

#else

TEST_CASE("cuda_forward: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
