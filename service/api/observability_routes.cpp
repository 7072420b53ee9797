// /metrics, /v1/engine/stats and /v1/jobs/{id}/timeline (see observability_routes.h).
#include "api/observability_routes.h"

#include <nlohmann/json.hpp>

#include "auth/keys.h"
#include "http/errors.h"
#include "metrics/exposition.h"
#include "obs/obs_store.h"
#include "store/store.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;

namespace {

constexpr int64_t k_worker_stale_ms = 5 * 60 * 1000;     // a worker's share is dropped after this
constexpr int64_t k_default_window_ms = 10 * 60 * 1000;  // /v1/engine/stats without since_ms

const char* k_states[] = {"queued", "running", "requires_action", "completed", "failed", "cancelled", "incomplete"};
const char* k_priorities[] = {"high", "normal", "low", "batch"};

http::response json_ok(const json& body) {
  http::response r;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

metrics::family gauge_family(std::string name, std::string help) {
  metrics::family f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = metrics::metric_type::gauge;
  return f;
}

}  // namespace

std::vector<metrics::family> observability_families(const api_deps& deps, int64_t now_ms) {
  std::vector<metrics::family> out;
  if (!deps.obs) return out;
  auto jobs = gauge_family("agentq_jobs", "Jobs in the store by state.");
  auto depth = gauge_family("agentq_queue_depth", "Queued jobs by priority.");
  auto age = gauge_family("agentq_queue_oldest_age_seconds", "Age of the oldest queued job by priority (0 when none).");
  double by_state[7] = {0}, by_prio[4] = {0};
  int64_t oldest[4] = {0, 0, 0, 0};
  for (const auto& c : deps.obs->job_counts()) {
    for (int i = 0; i < 7; ++i)
      if (c.status == k_states[i]) by_state[i] += double(c.n_jobs);
    if (c.status == "queued" && c.priority >= 0 && c.priority < 4) {
      by_prio[c.priority] += double(c.n_jobs);
      if (oldest[c.priority] == 0 || c.oldest_updated_ms < oldest[c.priority]) oldest[c.priority] = c.oldest_updated_ms;
    }
  }
  for (int i = 0; i < 7; ++i) jobs.samples.push_back(metrics::value_sample({{"state", k_states[i]}}, by_state[i]));
  for (int p = 0; p < 4; ++p) {
    depth.samples.push_back(metrics::value_sample({{"priority", k_priorities[p]}}, by_prio[p]));
    double a = oldest[p] ? double(std::max<int64_t>(0, now_ms - oldest[p])) / 1000.0 : 0;
    age.samples.push_back(metrics::value_sample({{"priority", k_priorities[p]}}, a));
  }
  auto held = gauge_family("agentq_jobs_held",
                           "Queued jobs held because their tenant is at --tenant-max-running running jobs.");
  held.samples.push_back(metrics::value_sample({}, double(deps.obs->n_held_jobs())));
  out.push_back(std::move(jobs));
  out.push_back(std::move(held));
  out.push_back(std::move(depth));
  out.push_back(std::move(age));
  for (auto& w : deps.obs->latest_families(now_ms - k_worker_stale_ms)) {
    auto fams = metrics::from_json(w.families);
    metrics::add_label(fams, "worker", w.worker_id);
    for (auto& f : fams) out.push_back(std::move(f));
  }
  return out;
}

void install_observability_routes(http::router& r, const api_options& options, const api_deps& deps,
                                  const authed_wrap& authed) {
  // NOTE: unauthenticated unless --metrics-token is set (scrapers rarely carry API keys);
  // it shows counts and latencies only, never job content, tenants or keys.
  r.add("GET", "/metrics", [deps, token = options.metrics_token](http::request& req) {
    if (!token.empty() && req.header("authorization") != "Bearer " + token) {
      auto res =
          error_response(error_kind::authentication, "GET /metrics needs 'Authorization: Bearer <metrics token>'");
      res.headers.emplace_back("WWW-Authenticate", "Bearer");
      return res;
    }
    auto fams = metrics::global().collect();
    for (auto& f : observability_families(deps, store::now_ms())) fams.push_back(std::move(f));
    http::response res;
    res.content_type = metrics::k_text_content_type;
    res.body = metrics::render(metrics::merge(std::move(fams)));
    return res;
  });

  r.add("GET", "/v1/engine/stats", authed([deps](http::request& req, const auth::key_info&) {
          int64_t now = store::now_ms();
          int64_t since = now - k_default_window_ms;
          if (auto v = req.query_param("since_ms")) {
            bool ok = !v->empty() && v->size() <= 18;
            for (char c : *v) ok = ok && c >= '0' && c <= '9';
            if (!ok)
              return error_response(error_kind::invalid_request,
                                    "since_ms must be a non-negative integer (ms since the epoch)", "since_ms");
            since = std::stoll(*v);
          }
          for (auto& [k, v] : req.query_params())
            if (k != "since_ms")
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
          if (!deps.obs) return json_ok({{"object", "engine.stats"}, {"now_ms", now}, {"workers", json::array()}});
          return json_ok(deps.obs->engine_stats(since, now));
        }));

  r.add("GET", "/v1/jobs/{id}/timeline", authed([deps](http::request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps.store->get_job(id, key.tenant);
          if (!job) return error_response(error_kind::not_found, "no job '" + id + "'", "id");
          if (!deps.obs) return error_response(error_kind::unavailable, "timelines are not available on this server");
          return json_ok(deps.obs->timeline(*job));
        }));
}

}  // namespace agentq::api
