// The CPU forward's steady state allocates nothing: once a batch shape has run, running it again
// makes no heap allocation and touches no new page (docs/queue_perf.md "Session 24": a forward
// right after other work is slower for reasons outside the process; this keeps ours out of it).
// Counts every operator new in this binary (the forward's vectors allocate through it).
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/reader.h"
#include "test_env.h"

#include "count_new.h"

using namespace agentq;

namespace {

long minor_faults() {
  rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// One batch shape: n_seqs sequences of n_tokens each after n_past cached positions.
struct shape {
  int32_t n_seqs, n_past, n_tokens;
};

void check_steady(int32_t n_threads) {
  test::require_tiny_model();
  std::string err;
  std::shared_ptr<const gguf::file> f = gguf::file::open(test::tiny_model().string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto be = forward_backend::create("cpu", f, n_threads, &err);
  REQUIRE_MESSAGE(be, err);
  constexpr int32_t k_block = 64, k_blocks_seq = 2;
  const shape shapes[] = {{1, 0, 24}, {1, 11, 13}, {8, 11, 13}, {16, 40, 1}, {3, 60, 7}};
  REQUIRE(be->alloc_kv(k_block, 16 * k_blocks_seq, &err));
  const int32_t n_vocab = be->hparams().n_vocab;
  std::vector<int32_t> table(16 * k_blocks_seq);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  std::vector<token_id> tokens(16 * k_blocks_seq * k_block);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = token_id((i * 7919 + 13) % size_t(n_vocab));
  std::vector<float> logits(size_t(16) * size_t(n_vocab));
  // Every sequence's context first (writes each K/V page once), then each shape's batch.
  std::vector<batch_seq> prefix;
  for (int32_t q = 0; q < 16; ++q)
    prefix.push_back({table.data() + q * k_blocks_seq, 0, tokens.data() + size_t(q) * k_blocks_seq * k_block, 100,
                      false});
  REQUIRE(be->forward(prefix, logits.data()) == 16);
  std::vector<std::vector<batch_seq>> batches;
  for (const shape& s : shapes) {
    std::vector<batch_seq> b;
    for (int32_t q = 0; q < s.n_seqs; ++q)
      b.push_back({table.data() + q * k_blocks_seq, s.n_past,
                   tokens.data() + size_t(q) * k_blocks_seq * k_block + size_t(s.n_past), s.n_tokens, false});
    batches.push_back(std::move(b));
  }
  for (const auto& b : batches) REQUIRE(be->forward(b, logits.data()) == int32_t(b.size()));  // scratch grows
  const long n_new0 = test::n_new(), faults0 = minor_faults();
  for (int rep = 0; rep < 5; ++rep)
    for (const auto& b : batches) REQUIRE(be->forward(b, logits.data()) == int32_t(b.size()));
  CHECK_MESSAGE(test::n_new() - n_new0 == 0, "heap allocations in steady-state forwards");
  // NOTE: the calling thread's faults only (a pool worker's would not show); with one thread
  // that is all of the forward. Not under ASan: its shadow memory and quarantine fault pages in
  // on their own (4 faults here while the code under test faults none).
#if !defined(__SANITIZE_ADDRESS__)
  if (n_threads == 1) CHECK_MESSAGE(minor_faults() - faults0 == 0, "page faults in steady-state forwards");
#else
  (void)faults0;
#endif
}

}  // namespace

TEST_CASE("a steady-state CPU forward allocates nothing and faults no page (one thread)") {
  check_steady(1);
}

TEST_CASE("a steady-state CPU forward allocates nothing (two threads)") {
  check_steady(2);
}
