// Scale-out measurement (issue 7): the same batch of short jobs drained by one worker, then by two
// workers sharing the queue; prints jobs/s and the ratio. A measurement, not a timed assertion: on
// a 2-core host the two workers share the cores with the API, Redis and each other.
//   ctest -L slow -R chaos_throughput --output-on-failure   (AGENTQ_TPUT_JOBS=N: batch size, default 120)
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

namespace {

// Submit n short text jobs at once, time until every one is terminal; jobs/s.
double drain_rate(int n_workers, int n_jobs, int engine_threads) {
  test::cluster_options o;
  o.n_workers = n_workers;
  if (engine_threads > 0) o.worker_args = {"--engine-threads", std::to_string(engine_threads)};
  o.max_jobs = 8;
  test::cluster c(o);
  std::vector<std::string> ids;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_jobs; ++i) {
    auto id = c.client().submit(test::text_job("", "tput-" + std::to_string(i), 48));
    REQUIRE(id);
    ids.push_back(*id);
  }
  REQUIRE(c.wait_terminal(ids, 300s));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(c.drain(30s));
  auto r = test::check_history(c, "throughput-" + std::to_string(n_workers) + "w");
  CHECK(r.ok());
  MESSAGE(r.summary());
  return n_jobs / s;
}

}  // namespace

TEST_CASE("two workers sharing a queue: throughput vs one") {
  const int n_jobs = std::stoi(test::env_or("AGENTQ_TPUT_JOBS", "120"));  // batch size
  // Engines on one thread per core (the default), then on one thread each: a single worker then
  // leaves a core for the second, which is what adding a worker on a free core or machine is like.
  for (int threads : {0, 1}) {
    double one = drain_rate(1, n_jobs, threads);
    double two = drain_rate(2, n_jobs, threads);
    MESSAGE("engine threads " << (threads ? std::to_string(threads) : std::string("per core"))
                              << ": jobs/s with 1 worker: " << one << ", with 2 workers: " << two << ", ratio "
                              << two / one << " (" << n_jobs << " jobs of <= 48 tokens, "
                              << std::thread::hardware_concurrency() << " hardware threads)");
    CHECK(one > 0);
    CHECK(two > 0);
  }
}
