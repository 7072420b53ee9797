// End to end over loopback (real agentqd, embedded redis-server, the tiny model): a job with a
// server-side tool (first attempt fails: one retry) and a signed webhook, then
//   GET /metrics         specific series (jobs by state, HTTP by route pattern, tokens, webhooks)
//   GET /v1/engine/stats the worker's samples in the contract shape
//   GET /v1/jobs/{id}/timeline  queue wait, claim, prefill/decode per turn, the tool span with its
//                        retry, webhook attempt; other tenant -> 404
//   agentq status ID --timeline  the text chart (and --json)
//   logs                 --log-format json: job lines carry job_id; no API key or webhook secret appears
// promtool's check of /metrics is tests/e2e/metrics_promtool.sh.
#include <doctest/doctest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "agentqd_e2e.h"
#include "test_env.h"
#include "tool_server.h"
#include "webhooks/signing.h"

using namespace agentq;
using namespace agentq::test::e2e;
using json = nlohmann::json;

namespace {

// The value of the first sample line starting with `series` (name + labels), or nullopt.
std::optional<double> series_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

// Sum of every sample of a metric whose line starts with prefix (e.g. a name and some labels).
double sum_series(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  while (std::getline(in, line))
    if (line.starts_with(prefix)) sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

std::string run_cli(const daemon_proc& d, const std::string& key, const std::string& args, int* rc) {
  std::string cmd = (test::bin_dir() / "agentq").string() + " --url http://127.0.0.1:" + std::to_string(d.port) +
                    " --api-key " + key + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *rc = WEXITSTATUS(pclose(p));
  return out;
}

}  // namespace

TEST_CASE("observability: metrics, engine stats, job timeline, logs") {
  test::require_tiny_model();
  daemon_proc d({"--log-format", "json", "--log-level", "debug"});
  api admin{d, k_admin_key};
  api anon{d, ""};
  receiver hook;
  auto [key, key_secret] = make_tenant(admin, "t-obs");
  api user{d, key};
  std::string job_secret = webhooks::generate_secret();

  int n_tool_calls = 0;
  test::tool_server tools([&n_tool_calls](const test::tool_server::request&) {
    // The first attempt fails with a retryable 503: the timeline shows the retry.
    return ++n_tool_calls == 1 ? std::pair{503, std::string("busy")}
                               : std::pair{200, std::string(R"({"output":"sunny"})")};
  });
  json tool = {
      {"type", "function"},
      {"function",
       {{"name", "look"},
        // NOTE: an enum keeps the tiny model's constrained call short.
        {"parameters",
         {{"type", "object"}, {"properties", {{"q", {{"enum", {"Paris", "London"}}}}}}, {"required", {"q"}}}}}},
      {"execution", {{"type", "http"}, {"url", tools.url()}, {"timeout_ms", 5000}, {"max_retries", 2}}}};
  json body = {{"model", "stories260K"},
               {"messages", {{{"role", "user"}, {"content", "weather?"}}}},
               {"tools", {tool}},
               {"tool_choice", "required"},
               {"parallel_tool_calls", false},
               {"max_turns", 2},
               {"max_tokens_per_turn", 400},
               {"webhook", {{"url", hook.url()}, {"secret", job_secret}}}};
  auto sub = user.post("/v1/jobs", body);
  REQUIRE_MESSAGE(sub.status == 202, sub.raw);
  std::string id = sub.body["id"];
  auto job = user.wait_status(id, {"completed", "failed", "incomplete", "cancelled"});
  INFO("job: " << job.dump());
  REQUIRE((job["status"] == "completed" || job["status"] == "incomplete"));
  REQUIRE(hook.wait_for([](const auto& hits) { return !hits.empty(); }, 15s));
  // the worker's share lands with its next engine sample (about every second)
  std::this_thread::sleep_for(1500ms);

  {  // GET /metrics: series and values
    auto m = anon.get("/metrics");
    REQUIRE(m.status == 200);
    CHECK(m.res.header("content-type").starts_with("text/plain; version=0.0.4"));
    const std::string& t = m.raw;
    CHECK(t.find("# TYPE agentq_jobs gauge") != std::string::npos);
    CHECK(series_value(t, "agentq_jobs{state=\"" + job["status"].get<std::string>() + "\"}") == 1);
    CHECK(series_value(t, "agentq_queue_depth{priority=\"normal\"}") == 0);
    CHECK(series_value(t, "agentq_http_requests_total{method=\"POST\",route=\"/v1/jobs\",status=\"202\"}") == 1);
    // the route pattern, never the raw path
    CHECK(sum_series(t, "agentq_http_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\",status=\"200\"}") >= 1);
    CHECK(t.find(id) == std::string::npos);
    CHECK(sum_series(t, "agentq_generated_tokens_total{worker=") > 0);
    CHECK(sum_series(t, "agentq_prompt_tokens_computed_total{worker=") > 0);
    CHECK(sum_series(t, "agentq_turn_time_to_first_token_seconds_count{worker=") >= 1);
    CHECK(sum_series(t, "agentq_job_queue_wait_seconds_count{worker=") == 1);
    if (n_tool_calls > 0) CHECK(sum_series(t, "agentq_tool_wait_seconds_count{worker=") >= 1);
    CHECK(sum_series(t, "agentq_job_duration_seconds_count{worker=") == 1);
    CHECK(sum_series(t, "agentq_kv_blocks{worker=") > 0);
    CHECK(series_value(t, "agentq_webhook_deliveries_total{outcome=\"succeeded\"}") >= 1);
    CHECK(sum_series(t, "agentq_webhook_delivery_duration_seconds_count") >= 1);
    CHECK(series_value(t, "agentq_sqlite_errors_total") == 0);
    CHECK(series_value(t, "agentq_redis_errors_total").has_value());
  }

  {  // GET /v1/engine/stats
    auto r = user.get("/v1/engine/stats?since_ms=0");
    REQUIRE(r.status == 200);
    CHECK(r.body["object"] == "engine.stats");
    CHECK(r.body["now_ms"].is_number_integer());
    REQUIRE(r.body["workers"].size() == 1);
    const json& w = r.body["workers"][0];
    CHECK(w["worker_id"].is_string());
    REQUIRE(!w["samples"].empty());
    double max_tps = 0;
    for (const auto& s : w["samples"]) {
      for (const char* k : {"at_ms", "batch_size", "running", "waiting", "kv_blocks_used", "kv_blocks_total",
                            "kv_blocks_parked", "kv_blocks_spilled"})
        CHECK_MESSAGE(s[k].is_number_integer(), k);
      for (const char* k : {"tokens_per_s", "prompt_tokens_per_s", "prefix_hit_rate"})
        CHECK_MESSAGE(s[k].is_number(), k);
      CHECK(s["prefix_hit_rate"].get<double>() >= 0);
      CHECK(s["prefix_hit_rate"].get<double>() <= 1);
      CHECK(s["kv_blocks_total"].get<int64_t>() > 0);
      max_tps = std::max(max_tps, s["tokens_per_s"].get<double>());
    }
    CHECK(max_tps > 0);
    int64_t last = w["samples"].back()["at_ms"];
    auto later = user.get("/v1/engine/stats?since_ms=" + std::to_string(last));
    REQUIRE(later.status == 200);
    for (const auto& lw : later.body["workers"])
      for (const auto& s : lw["samples"]) CHECK(s["at_ms"].get<int64_t>() > last);
    CHECK(user.get("/v1/engine/stats?since_ms=abc").status == 400);
    CHECK(anon.get("/v1/engine/stats").status == 401);
  }

  {  // GET /v1/jobs/{id}/timeline and agentq status --timeline
    auto r = user.get("/v1/jobs/" + id + "/timeline");
    REQUIRE(r.status == 200);
    const json& t = r.body;
    INFO("timeline: " << t.dump(1));
    CHECK(t["object"] == "job.timeline");
    CHECK(t["job_id"] == id);
    CHECK(t["status"] == job["status"]);
    CHECK(t["created_ms"].is_number_integer());
    CHECK(t["finished_ms"].is_number_integer());
    std::map<std::string, int> spans, marks;
    for (const auto& s : t["spans"]) {
      spans[s["kind"]]++;
      CHECK(s["start_ms"].get<int64_t>() >= t["created_ms"].get<int64_t>() - 5);
      CHECK(s["label"].is_string());
      CHECK(s["attrs"].is_object());
      if (s["end_ms"].is_number()) CHECK(s["end_ms"].get<int64_t>() >= s["start_ms"].get<int64_t>());
      if (s["kind"] == "prefill") CHECK(s["attrs"].contains("cached_tokens"));
      if (s["kind"] == "decode") CHECK(s["attrs"]["tokens"].get<int>() > 0);
      if (s["kind"] == "tool") {
        CHECK(s["attrs"]["name"] == "look");
        CHECK(s["attrs"]["retries"] == 1);
        CHECK(s["attrs"]["ok"] == true);
        CHECK(s["turn"] == 0);
      }
      if (s["kind"] == "webhook") CHECK(s["attrs"]["status_code"] == 200);
    }
    for (const auto& m : t["marks"]) marks[m["kind"]]++;
    CHECK(spans["queue_wait"] >= 1);
    CHECK(spans["prefill"] >= 1);
    CHECK(spans["decode"] >= 1);
    CHECK(spans["webhook"] >= 1);
    CHECK(marks["queued"] == 1);
    CHECK(marks["claimed"] >= 1);
    CHECK(marks[job["status"].get<std::string>()] == 1);
    bool called_tool = n_tool_calls > 0;
    if (called_tool) {
      CHECK(spans["tool"] == 1);
      CHECK(spans["parked"] >= 1);
    }
    for (const auto& m : t["marks"])
      if (m["kind"] == "claimed") CHECK(m["attrs"]["worker"].is_string());

    // tenant-scoped like GET /v1/jobs/{id}
    auto [other_key, other_secret] = make_tenant(admin, "t-other");
    api other{d, other_key};
    CHECK(other.get("/v1/jobs/" + id + "/timeline").status == 404);
    CHECK(user.get("/v1/jobs/job_000000000000000000000000/timeline").status == 404);

    int rc = 0;
    std::string chart = run_cli(d, key, "status " + id + " --timeline", &rc);
    MESSAGE("agentq status --timeline:\n" << chart);
    CHECK(rc == 0);
    CHECK(chart.find(id) != std::string::npos);
    CHECK(chart.find("prefill") != std::string::npos);
    CHECK(chart.find("|") != std::string::npos);
    std::string raw = run_cli(d, key, "--json status " + id + " --timeline", &rc);
    CHECK(rc == 0);
    CHECK(json::parse(raw, nullptr, false)["object"] == "job.timeline");
  }

  {  // logs: JSON lines with job_id, and no secrets
    std::string log = d.log();
    std::ifstream f(d.dir / "data" / "agentqd.log");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string file_log = ss.str();
    CHECK(!file_log.empty());
    for (const std::string* text : {&log, &file_log}) {
      CHECK(text->find(key) == std::string::npos);
      CHECK(text->find(k_admin_key) == std::string::npos);
      CHECK(text->find(key_secret) == std::string::npos);
      CHECK(text->find(job_secret) == std::string::npos);
      CHECK(text->find(job_secret.substr(6)) == std::string::npos);  // the base64 key alone
    }
    int n_lines = 0, n_about_job = 0, n_with_id = 0;
    std::istringstream in(file_log);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      REQUIRE_MESSAGE(j.is_object(), line);
      CHECK(j.contains("ts"));
      CHECK(j.contains("level"));
      ++n_lines;
      if (j["msg"].get<std::string>().find(id) != std::string::npos) {
        ++n_about_job;
        if (j.value("job_id", "") == id) ++n_with_id;
      }
    }
    MESSAGE(n_lines << " log lines, " << n_about_job << " about the job");
    CHECK(n_about_job >= 1);
    CHECK(n_with_id == n_about_job);
  }
}
