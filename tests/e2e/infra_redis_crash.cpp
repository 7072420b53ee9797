// Fault scenarios (docs/RELIABILITY.md, "Infrastructure faults"): Redis killed with -9 and
// restarted, Redis losing the tail of its AOF, Redis wiped with FLUSHALL. SQLite is the truth and
// Redis only transport: the outbox relay and the reconciler put back whatever Redis forgot, and the
// history checker finds every promise kept (no acknowledged job lost, one terminal state each).
#include <doctest/doctest.h>

#include <filesystem>

#include "cluster.h"
#include "history_check.h"
#include "infra_faults.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("redis kill -9 and restart (appendfsync everysec): no accepted job lost") {
  test::cluster c;  // AOF everysec: a kill -9 may lose up to ~1 s of writes (XADDs, XACKs)
  auto before = test::submit_tiny(c, 10, "redis-kill-before");
  c.redis().kill9();
  // submissions only touch SQLite: still 202 while Redis is down
  auto during = test::submit_tiny(c, 10, "redis-kill-during");
  CHECK(during.size() == 10);
  std::this_thread::sleep_for(1s);
  c.redis().start();
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "redis-kill9-restart");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 20);
}

TEST_CASE("redis loses the last seconds of its AOF: the reconciler re-publishes from SQLite") {
  test::cluster_options o;
  o.appendfsync = "always";  // every command is in the file before its reply: the cut is exact
  test::cluster c(o);
  for (size_t i = 0; i < c.n_workers(); ++i) c.worker(i).kill9();  // let the jobs sit in Redis
  auto kept = test::submit_tiny(c, 8, "aof-kept");
  REQUIRE(test::eventually([&] { return test::n_stream_entries(c.redis()) == 8; }, 10s));
  auto aof = test::aof_tail_file(c.redis().dir());
  REQUIRE_MESSAGE(!aof.empty(), "no AOF file under " << c.redis().dir());
  auto cut = std::filesystem::file_size(aof);
  auto lost = test::submit_tiny(c, 8, "aof-lost");
  REQUIRE(test::eventually([&] { return test::n_stream_entries(c.redis()) == 16; }, 10s));
  c.redis().kill9();
  std::filesystem::resize_file(aof, cut);  // the last jobs' XADDs and inflight entries are gone
  c.redis().start();
  CHECK(test::n_stream_entries(c.redis()) == 8);
  for (size_t i = 0; i < c.n_workers(); ++i) c.restart_worker(i);
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "redis-aof-tail-lost");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 16);
  // every agentqd process runs the relay and the reconciler; one of them put the lost 8 back
  std::string logs = c.api().log_text();
  for (size_t i = 0; i < c.n_workers(); ++i) logs += c.worker(i).log_text();
  CHECK(logs.find("reconciler re-published") != std::string::npos);
}

TEST_CASE("redis wiped (FLUSHALL) under a backlog: the reconciler restores it, workers recreate groups") {
  test::cluster c;
  c.worker(0).kill9();
  c.worker(1).pause();  // stays connected through the wipe, holding its consumer group state
  auto ids = test::submit_tiny(c, 10, "flushall");
  REQUIRE(test::eventually([&] { return test::n_stream_entries(c.redis()) == 10; }, 10s));
  CHECK(c.redis().command({"FLUSHALL"}) == "+OK");
  c.worker(1).resume();
  c.restart_worker(0);
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "redis-flushall");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 10);
}
