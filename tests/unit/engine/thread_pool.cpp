// The forward pass's thread pool: every item of every parallel_for runs exactly once,
// back-to-back jobs of any size (including ones smaller than the pool) complete, and
// a pool survives idle periods long enough for its workers to sleep.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "util/thread_pool.h"

using namespace agentq;

TEST_CASE("parallel_for covers every item exactly once") {
  for (int32_t n_threads : {1, 2, 3, 8}) {
    CAPTURE(n_threads);
    thread_pool pool(n_threads);
    CHECK(pool.n_threads() == n_threads);
    uint64_t x = 12345;
    for (int job = 0; job < 2000; ++job) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t n = int64_t(x >> 33) % 300;
      const int64_t min_chunk = 1 + int64_t(x >> 20) % 5;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        REQUIRE(0 <= b);
        REQUIRE(b < e);
        REQUIRE(e <= n);
        REQUIRE(b % min_chunk == 0);
        REQUIRE((e % min_chunk == 0 || e == n));
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
      }, min_chunk);
      int bad = 0;
      for (auto& h : hits) bad += h.load() != 1;
      REQUIRE(bad == 0);
    }
  }
}

TEST_CASE("workers wake after sleeping") {
  thread_pool pool(4);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin window
    std::atomic<int64_t> sum{0};
    pool.parallel_for(1000, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i;
      sum += s;
    });
    CHECK(sum.load() == 999 * 1000 / 2);
  }
}

TEST_CASE("the 16-bit job generation wraps around safely") {
  thread_pool pool(3);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 70000; ++job)
    pool.parallel_for(6, [&](int64_t b, int64_t e) { total += e - b; });
  CHECK(total.load() == 6 * 70000);
}
