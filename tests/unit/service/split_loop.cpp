// util::split_loop (the Batch acceptance's two mapping threads): every index of a run is visited
// exactly once, the first half on the named helper thread at the same time as the second on the
// caller's; a short run stays on the caller (no helper starts before the first run that splits);
// an exception of either half reaches the caller, and the helper runs the next loop after it.
#include <doctest/doctest.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "util/split_loop.h"

using namespace agentq;

namespace {
std::string thread_name() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}
}  // namespace

TEST_CASE("split_loop: every index once, the halves on two threads; short runs inline") {
  util::split_loop loop("aq-test-split");
  loop.run(63, [](size_t, size_t) {});
  CHECK(loop.helper_cpu_s() == 0);  // no run split yet: no helper thread
  for (size_t n : {0, 1, 63, 64, 65, 1000, 5001}) {
    std::vector<std::atomic<int>> seen(n);
    std::vector<std::thread::id> by(n);
    std::vector<std::string> names(n);
    loop.run(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        seen[i]++;
        by[i] = std::this_thread::get_id();
        names[i] = thread_name();
      }
    });
    for (size_t i = 0; i < n; ++i) CHECK(seen[i] == 1);
    if (n >= 64) {
      CHECK(by.front() != std::this_thread::get_id());
      CHECK(names.front() == "aq-test-split");
      CHECK(by.back() == std::this_thread::get_id());
      CHECK(by[n / 2 - 1] != by[n / 2]);
    } else if (n > 0) {
      CHECK(by.front() == std::this_thread::get_id());
    }
  }
  CHECK(loop.helper_cpu_s() >= 0);
}

TEST_CASE("split_loop: the halves run at once") {
  util::split_loop loop("aq-test-split");
  std::atomic<int> inside{0};
  std::atomic<bool> met{false};
  loop.run(100, [&](size_t, size_t) {
    inside++;
    // each half waits (bounded) for the other to be inside too
    for (int i = 0; i < 2000 && inside.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (inside.load() == 2) met = true;
  });
  CHECK(met);
}

TEST_CASE("split_loop: an exception of either half reaches the caller; the helper runs on") {
  util::split_loop loop("aq-test-split");
  CHECK_THROWS_AS(loop.run(100, [](size_t begin, size_t) {
    if (begin == 0) throw std::runtime_error("helper half");
  }),
                  std::runtime_error);
  CHECK_THROWS_AS(loop.run(100, [](size_t begin, size_t) {
    if (begin != 0) throw std::logic_error("caller half");
  }),
                  std::logic_error);
  std::atomic<size_t> sum{0};
  loop.run(100, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) sum += i;
  });
  CHECK(sum == 4950);
}
