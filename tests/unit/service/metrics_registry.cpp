// The metrics registry and its text exposition: counters/gauges/histograms with labels, escaping,
// cumulative buckets, merge of same-name families, the JSON round trip workers ship through
// SQLite, and concurrent updates.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "metrics/exposition.h"
#include "metrics/registry.h"

using namespace agentq::metrics;

TEST_CASE("render: HELP/TYPE, labels, escaping, histogram buckets") {
  registry r;
  r.counter_family("agentq_x_total", "X things.", {"route", "status"}).with({"/v1/jobs/{id}", "200"}).inc(3);
  r.gauge_family("agentq_depth", "Depth\nwith newline.").with().set(2.5);
  r.counter_family("agentq_q_total", "Quoted.", {"v"}).with({"a\"b\\c\nd"}).inc();
  auto& h = r.histogram_family("agentq_wait_seconds", "Waits.", {}, {0.1, 1});
  h.with().observe(0.05);
  h.with().observe(0.1);  // le is inclusive
  h.with().observe(0.5);
  h.with().observe(7);
  std::string t = render(r.collect());
  CHECK(t.find("# HELP agentq_x_total X things.\n# TYPE agentq_x_total counter\n") != std::string::npos);
  CHECK(t.find("agentq_x_total{route=\"/v1/jobs/{id}\",status=\"200\"} 3\n") != std::string::npos);
  CHECK(t.find("# HELP agentq_depth Depth\\nwith newline.\n") != std::string::npos);
  CHECK(t.find("agentq_depth 2.5\n") != std::string::npos);
  CHECK(t.find("agentq_q_total{v=\"a\\\"b\\\\c\\nd\"} 1\n") != std::string::npos);
  CHECK(t.find("agentq_wait_seconds_bucket{le=\"0.1\"} 2\n") != std::string::npos);
  CHECK(t.find("agentq_wait_seconds_bucket{le=\"1\"} 3\n") != std::string::npos);
  CHECK(t.find("agentq_wait_seconds_bucket{le=\"+Inf\"} 4\n") != std::string::npos);
  CHECK(t.find("agentq_wait_seconds_sum 7.65\n") != std::string::npos);
  CHECK(t.find("agentq_wait_seconds_count 4\n") != std::string::npos);
  // families sorted by name, each once
  CHECK(t.find("agentq_depth") < t.find("agentq_q_total"));
}

TEST_CASE("JSON round trip, worker label, merge of same-name families") {
  registry w;
  w.counter_family("agentq_generated_tokens_total", "Tokens.").with().set(42);
  w.histogram_family("agentq_ttft_seconds", "TTFT.", {"k"}, {0.5}).with({"a"}).observe(0.2);
  auto fams = from_json(nlohmann::json::parse(to_json(w.collect()).dump()));
  REQUIRE(fams.size() == 2);
  add_label(fams, "worker", "w1");
  auto fams2 = from_json(to_json(w.collect()));
  add_label(fams2, "worker", "w2");
  for (auto& f : fams2) fams.push_back(std::move(f));
  std::string t = render(merge(std::move(fams)));
  CHECK(t.find("agentq_generated_tokens_total{worker=\"w1\"} 42\n") != std::string::npos);
  CHECK(t.find("agentq_generated_tokens_total{worker=\"w2\"} 42\n") != std::string::npos);
  CHECK(t.find("agentq_ttft_seconds_bucket{worker=\"w1\",k=\"a\",le=\"0.5\"} 1\n") != std::string::npos);
  size_t first = t.find("# TYPE agentq_generated_tokens_total");
  CHECK(t.find("# TYPE agentq_generated_tokens_total", first + 1) == std::string::npos);
  CHECK(from_json(nlohmann::json::parse(R"([{"name":"x"},{"name":"y","type":"gauge","samples":[]}])")).size() == 1);
}

TEST_CASE("concurrent updates are not lost") {
  registry r;
  auto& c = r.counter_family("agentq_n_total", "N.", {"t"});
  auto& h = r.histogram_family("agentq_h_seconds", "H.");
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      for (int k = 0; k < 10000; ++k) {
        c.with({"x"}).inc();
        h.with().observe(0.001);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(c.with({"x"}).value() == 40000);
  std::string t = render(r.collect());
  CHECK(t.find("agentq_h_seconds_count 40000\n") != std::string::npos);
}
