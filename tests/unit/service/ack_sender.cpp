// worker/ack_sender with a fake ack function: every posted ack is sent exactly once; a post never
// waits for a round trip in progress, and acks posted meanwhile share the next pipeline; the
// destructor sends what is still queued; flush() waits for what was posted before it.
#include "worker/ack_sender.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace agentq;
using agentq::queue::delivery;

namespace {

delivery entry(int i) {
  delivery d;
  d.job_id = "job" + std::to_string(i);
  d.entry_id = std::to_string(i) + "-0";
  d.stream = "agentq:jobs:normal";
  return d;
}

struct recorder {
  std::mutex mu;
  std::map<std::string, int> seen;  // job id -> times acked
  std::vector<size_t> batch_sizes;
  void record(const std::vector<delivery>& ds) {
    std::lock_guard lock(mu);
    for (auto& d : ds) seen[d.job_id]++;
    batch_sizes.push_back(ds.size());
  }
};

}  // namespace

TEST_CASE("ack sender: acks from many threads are each sent once, in fewer pipelines than acks") {
  recorder r;
  {
    worker::ack_sender s([&](const std::vector<delivery>& ds) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));  // a round trip
      r.record(ds);
    });
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < 100; ++i) s.post(entry(t * 100 + i));
      });
    for (auto& t : ts) t.join();
    s.flush();
    CHECK(s.stats().n_acks == 800);
    CHECK(s.stats().n_batches == static_cast<int64_t>(r.batch_sizes.size()));
  }
  CHECK(r.seen.size() == 800);
  for (auto& [id, n] : r.seen) CHECK(n == 1);
  CHECK(r.batch_sizes.size() < 800);
  for (size_t n : r.batch_sizes) CHECK(n <= 64);
}

TEST_CASE("ack sender: a post does not wait for a round trip in progress; the destructor sends the rest") {
  recorder r;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> n_calls{0};
  auto s = std::make_unique<worker::ack_sender>([&](const std::vector<delivery>& ds) {
    if (n_calls++ == 0) released.wait();  // the first round trip hangs (Redis stopped)
    r.record(ds);
  });
  s->post(entry(0));
  for (int i = 0; i < 1000 && n_calls == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(n_calls == 1);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 10; ++i) s->post(entry(i));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 100);  // did not wait for the hung round trip
  release.set_value();
  s.reset();  // sends the 10 queued behind it
  CHECK(r.seen.size() == 11);
  CHECK(r.batch_sizes.size() == 2);  // the hung one, then the 10 posted meanwhile in one pipeline
}

TEST_CASE("ack sender: a failing ack function drops its batch and the sender goes on") {
  std::atomic<int> n_calls{0};
  worker::ack_sender s([&](const std::vector<delivery>&) {
    if (n_calls++ == 0) throw std::runtime_error("redis down");
  });
  s.post(entry(0));
  s.flush();
  s.post(entry(1));
  s.flush();
  CHECK(n_calls == 2);
  CHECK(s.stats().n_acks == 2);
}
