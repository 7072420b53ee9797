// Fault scenarios (docs/RELIABILITY.md, "Infrastructure faults"): Redis unreachable for ~10 s
// (SIGSTOP: connections hang rather than fail) and Redis out of memory (maxmemory + noeviction:
// every XADD refused). Submissions only touch SQLite, so they keep being acknowledged with 202; the
// outbox holds the backlog and drains once Redis is back.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"
#include "infra_faults.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("redis unreachable for 10 s (SIGSTOP): submissions still 202, the backlog drains after") {
  test::cluster c;
  auto warm = test::submit_tiny(c, 4, "stall-before");
  REQUIRE(c.wait_terminal(warm, 30s));
  c.redis().pause();
  auto t_end = std::chrono::steady_clock::now() + 10s;
  std::vector<double> ms;
  int n_sent = 0;
  while (std::chrono::steady_clock::now() < t_end) {
    auto t0 = std::chrono::steady_clock::now();
    bool ok = c.client().submit(test::tiny_job(c.webhook_url(), "stall-during-" + std::to_string(n_sent))).has_value();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    CHECK(ok);
    ++n_sent;
    std::this_thread::sleep_for(400ms);
  }
  c.redis().resume();
  double p50 = test::percentile(ms, 50), max = test::percentile(ms, 100);
  MESSAGE("submits while Redis was stopped: " << n_sent << ", latency p50 " << p50 << " ms, max " << max << " ms");
  CHECK(max < 2000);  // the API never waits on Redis
  auto t_resume = std::chrono::steady_clock::now();
  bool drained = c.drain(40s);
  MESSAGE("backlog drained " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t_resume).count()
                             << " s after SIGCONT");
  auto r = test::check_history(c, "redis-sigstop-10s");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 4 + n_sent);
}

TEST_CASE("redis out of memory (maxmemory, noeviction): jobs wait in the outbox, none lost") {
  test::cluster c;
  CHECK(c.redis().command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}) == "+OK");
  CHECK(c.redis().command({"CONFIG", "SET", "maxmemory", "1"}) == "+OK");  // every write is over the limit
  auto ids = test::submit_tiny(c, 10, "redis-oom");
  CHECK(ids.size() == 10);
  std::this_thread::sleep_for(2s);
  // nothing got through: the jobs are still queued (Redis refused the XADDs with -OOM)
  int n_queued = 0;
  for (auto& id : ids) n_queued += c.client().get_job(id).value("status", "") == "queued";
  CHECK(n_queued == 10);
  CHECK(test::n_stream_entries(c.redis()) <= 0);
  CHECK(c.redis().command({"CONFIG", "SET", "maxmemory", "0"}) == "+OK");
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "redis-oom");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 10);
}
