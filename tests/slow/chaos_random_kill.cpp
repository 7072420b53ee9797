// Slow fault scenario (docs/RELIABILITY.md, "Worker faults"): three workers under a steady stream
// of tool and text jobs while a random worker is killed (kill -9) every few seconds and restarted;
// the history checker finds every promise kept. ~1-2 minutes: ctest -L slow -R chaos_random_kill.
#include <doctest/doctest.h>

#include <random>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("random worker kill -9 under a steady job stream") {
  test::cluster_options o;
  o.n_workers = 3;
  test::cluster c(o);
  std::mt19937 rng(12345);
  int n_kills = 0;
  auto t_end = std::chrono::steady_clock::now() + 45s;
  auto next_kill = std::chrono::steady_clock::now() + 2s;
  for (int i = 0; std::chrono::steady_clock::now() < t_end; ++i) {
    std::string marker = "steady-" + std::to_string(i);
    c.client().submit(i % 2 ? test::text_job(c.webhook_url(), marker)
                            : test::tool_job(c.tool_url(), c.webhook_url(), marker));
    if (std::chrono::steady_clock::now() >= next_kill) {
      size_t victim = rng() % c.n_workers();
      c.worker(victim).kill9();
      n_kills++;
      std::this_thread::sleep_for(300ms);
      c.restart_worker(victim);
      next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500 + rng() % 2000);
    }
    std::this_thread::sleep_for(150ms);
  }
  bool drained = c.drain(90s);
  auto r = test::check_history(c, "random-worker-kill");
  MESSAGE(r.summary() << "\n  kills: " << n_kills);
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == r.n_submitted);
}
