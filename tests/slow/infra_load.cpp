// Sustained load with faults (docs/RELIABILITY.md, "Load"): tiny jobs (one output token) submitted
// at a steady rate for a bounded time by open-loop clients, while a worker is killed with -9 and
// restarted and Redis is killed with -9 and restarted. Samples RSS and open fds of the processes
// that live through the whole run (the API and the second worker) from /proc, reports submit
// latency p50/p99 against a stated bound, and ends with the history checker.
// Knobs: AGENTQ_LOAD_SECONDS (default 120), AGENTQ_LOAD_RATE (jobs/s, default 20),
// AGENTQ_LOAD_P99_MS (bound, default 500), AGENTQ_LOAD_OUT (write the figures there as JSON).
// Run: ctest --test-dir build -L slow -R infra_load --output-on-failure
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>

#include "cluster.h"
#include "history_check.h"
#include "infra_faults.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

double env_num(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

struct series {
  std::vector<double> t_s;
  std::vector<test::proc_sample> api, worker;
};

// Median of the samples whose time falls in [from, to) of the run, for one field.
double median_in(const series& s, const std::vector<test::proc_sample>& v, double from, double to, bool rss) {
  std::vector<double> x;
  for (size_t i = 0; i < v.size(); ++i)
    if (s.t_s[i] >= from && s.t_s[i] < to) x.push_back(double(rss ? v[i].rss_kb : v[i].n_fds));
  return test::percentile(x, 50);
}

}  // namespace

TEST_CASE("sustained load with worker and redis kills: latency bound, flat memory and fds, nothing lost") {
  const double seconds = env_num("AGENTQ_LOAD_SECONDS", 120), rate = env_num("AGENTQ_LOAD_RATE", 20);
  const double p99_bound_ms = env_num("AGENTQ_LOAD_P99_MS", 500);
  const int n_clients = 4;
  test::cluster_options o;
  o.max_jobs = 32;
  test::cluster c(o);

  std::mutex mu;
  std::vector<double> latency_ms;
  std::atomic<int> n_sent{0}, n_refused{0};
  auto t0 = clock_type::now();
  auto t_end = t0 + std::chrono::milliseconds(int64_t(seconds * 1000));
  std::vector<std::thread> clients;
  for (int k = 0; k < n_clients; ++k)
    clients.emplace_back([&, k] {
      // open loop: request i of client k is due at t0 + (i * n_clients + k) / rate, late or not
      for (int64_t i = 0;; ++i) {
        auto due = t0 + std::chrono::microseconds(int64_t(double(i * n_clients + k) / rate * 1e6));
        if (due >= t_end) break;
        std::this_thread::sleep_until(due);
        int seq = n_sent++;
        // every 10th job carries a webhook, so deliveries run under the same load
        std::string hook = seq % 10 == 0 ? c.webhook_url() : "";
        auto t_send = clock_type::now();
        bool ok = c.client().submit(test::tiny_job(hook, "load-" + std::to_string(seq))).has_value();
        double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_send).count();
        std::lock_guard lock(mu);
        latency_ms.push_back(ms);
        if (!ok) n_refused++;
      }
    });

  // faults and samples from this thread
  series s;
  bool worker_killed = false, redis_killed = false;
  pid_t api_pid = c.api().pid(), worker_pid = c.worker(1).pid();
  while (clock_type::now() < t_end) {
    double t = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (!worker_killed && t >= seconds / 3) {
      worker_killed = true;
      MESSAGE("t=" << t << "s: kill -9 worker 0, restart");
      c.worker(0).kill9();
      std::this_thread::sleep_for(1s);
      c.restart_worker(0);
    }
    if (!redis_killed && t >= 2 * seconds / 3) {
      redis_killed = true;
      MESSAGE("t=" << t << "s: kill -9 redis, restart");
      c.redis().kill9();
      std::this_thread::sleep_for(1s);
      c.redis().start();
    }
    s.t_s.push_back(t);
    s.api.push_back(test::sample_proc(api_pid));
    s.worker.push_back(test::sample_proc(worker_pid));
    std::this_thread::sleep_for(1s);
  }
  for (auto& t : clients) t.join();
  double submit_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto t_drain = clock_type::now();
  bool drained = c.drain(180s);
  double drain_s = std::chrono::duration<double>(clock_type::now() - t_drain).count();
  auto r = test::check_history(c, "load");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, n_sent - n_refused);

  std::vector<double> lat = latency_ms;
  double p50 = test::percentile(lat, 50), p99 = test::percentile(lat, 99), pmax = test::percentile(lat, 100);
  // flat: the last quarter's medians against the second quarter's (after warm-up)
  double q2 = seconds / 4, q3 = seconds / 2, q4 = 3 * seconds / 4;
  double api_rss_a = median_in(s, s.api, q2, q3, true), api_rss_b = median_in(s, s.api, q4, seconds + 1, true);
  double api_fd_a = median_in(s, s.api, q2, q3, false), api_fd_b = median_in(s, s.api, q4, seconds + 1, false);
  double w_rss_a = median_in(s, s.worker, q2, q3, true), w_rss_b = median_in(s, s.worker, q4, seconds + 1, true);
  double w_fd_a = median_in(s, s.worker, q2, q3, false), w_fd_b = median_in(s, s.worker, q4, seconds + 1, false);
  json figures = {{"seconds", seconds},
                  {"rate_per_s", rate},
                  {"submitted", int(n_sent)},
                  {"acked", r.n_acked},
                  {"completed", r.n_completed},
                  {"incomplete", r.n_incomplete},
                  {"failed", r.n_failed},
                  {"lost", r.n_lost},
                  {"webhook_hits", r.n_webhook_hits},
                  {"webhook_duplicates", r.n_webhook_duplicates},
                  {"violations", r.violations.size()},
                  {"submit_wall_s", submit_s},
                  {"drain_s", drain_s},
                  {"submit_ms", {{"p50", p50}, {"p99", p99}, {"max", pmax}, {"p99_bound", p99_bound_ms}}},
                  {"api_rss_kb", {{"q2_median", api_rss_a}, {"q4_median", api_rss_b}}},
                  {"api_fds", {{"q2_median", api_fd_a}, {"q4_median", api_fd_b}}},
                  {"worker_rss_kb", {{"q2_median", w_rss_a}, {"q4_median", w_rss_b}}},
                  {"worker_fds", {{"q2_median", w_fd_a}, {"q4_median", w_fd_b}}}};
  json samples = json::array();
  for (size_t i = 0; i < s.t_s.size(); ++i)
    samples.push_back({s.t_s[i], s.api[i].rss_kb, s.api[i].n_fds, s.worker[i].rss_kb, s.worker[i].n_fds});
  MESSAGE("load figures: " << figures.dump());
  if (const char* out = std::getenv("AGENTQ_LOAD_OUT"); out && *out)
    std::ofstream(out)
        << json{{"figures", figures}, {"samples [t_s, api_rss_kb, api_fds, worker_rss_kb, worker_fds]", samples}}.dump(
               1)
        << "\n";
  CHECK(p99 <= p99_bound_ms);
  // flat: last quarter within 25% + 16 MiB of the second quarter's resident memory, and 8 fds
  CHECK(api_rss_b <= api_rss_a * 1.25 + 16384);
  CHECK(w_rss_b <= w_rss_a * 1.25 + 16384);
  CHECK(api_fd_b <= api_fd_a + 8);
  CHECK(w_fd_b <= w_fd_a + 8);
}
