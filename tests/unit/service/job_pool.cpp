// worker/job_pool: threads start on demand up to the bound and are reused; every task runs; the
// destructor waits for queued and running tasks.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "worker/job_pool.h"

using agentq::worker::job_pool;

TEST_CASE("job_pool: sequential tasks reuse one thread") {
  job_pool pool(8);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> n{0};
  for (int i = 0; i < 50; ++i) {
    std::atomic<bool> done{false};
    pool.run([&] {
      {
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      n++;
      done = true;
    });
    while (!done) std::this_thread::yield();
    // NOTE: the thread marks itself idle a moment after the task returns
    for (int k = 0; k < 200 && pool.n_threads() > 1; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  CHECK(n == 50);
  CHECK(pool.n_threads() <= 2);  // a task may land while the last thread is still returning
  CHECK(ids.size() <= 2);
}

TEST_CASE("job_pool: concurrent blocking tasks each get a thread up to the bound; all run") {
  std::atomic<int> n{0}, running{0}, peak{0};
  std::atomic<bool> release{false};
  {
    job_pool pool(4);
    for (int i = 0; i < 4; ++i)
      pool.run([&] {
        int r = ++running;
        for (int p = peak; r > p && !peak.compare_exchange_weak(p, r);) {}
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        --running;
        n++;
      });
    for (int k = 0; k < 2000 && running < 4; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(peak == 4);
    CHECK(pool.n_threads() == 4);
    for (int i = 0; i < 6; ++i) pool.run([&] { n++; });  // queued behind the bound
    CHECK(pool.n_threads() == 4);
    release = true;
  }  // the destructor runs what is queued
  CHECK(n == 10);
}

TEST_CASE("job_pool: a task goes to the thread that went idle last (the warmest)") {
  job_pool pool(4);
  std::atomic<int> running{0};
  std::atomic<int> release{0};  // task i returns once release > i
  std::mutex mu;
  std::vector<std::thread::id> ids(4);
  for (int i = 0; i < 4; ++i)
    pool.run([&, i] {
      {
        std::lock_guard lock(mu);
        ids[i] = std::this_thread::get_id();
      }
      ++running;
      while (release <= i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --running;
    });
  for (int k = 0; k < 2000 && running < 4; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(running == 4);
  // The tasks return in order 0, 1, 2, 3, each thread idle before the next returns.
  for (int i = 0; i < 4; ++i) {
    release = i + 1;
    for (int k = 0; k < 2000 && running > 3 - i; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the return into the idle stack
  }
  for (int expect = 3; expect >= 0; --expect) {  // newest idle first; each stays busy while the next runs
    std::atomic<bool> started{false};
    std::thread::id got;
    pool.run([&, expect] {
      got = std::this_thread::get_id();
      started = true;
      while (release < 10 + expect) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    for (int k = 0; k < 2000 && !started; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(started);
    CHECK(got == ids[expect]);
  }
  release = 100;
  CHECK(pool.n_threads() == 4);
}
