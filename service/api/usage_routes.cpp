// Usage accounting over the job store (see usage_routes.h): finished jobs by the day they ended,
// summed from each job's usage totals; read on its own read-only connection per request.
#include "api/usage_routes.h"

#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/reply.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;

namespace {

constexpr int64_t k_day_ms = 86400000;

std::optional<int64_t> parse_seconds(const std::string& v) {
  if (v.empty() || v.size() > 12) return std::nullopt;
  int64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

void install_usage_routes(http::router& r, const api_deps& deps, const authed_wrap& authed) {
  r.add("GET", "/v1/usage", authed([deps](http::request& req, const auth::key_info& key) {
          std::optional<int64_t> start, end;
          bool by_key = false, by_model = false;
          for (auto& [k, v] : req.query_params()) {
            if (k == "start" || k == "start_time") {
              start = parse_seconds(v);
              if (!start) return error_response(error_kind::invalid_request, "'" + k + "' must be Unix seconds", k);
            } else if (k == "end" || k == "end_time") {
              end = parse_seconds(v);
              if (!end) return error_response(error_kind::invalid_request, "'" + k + "' must be Unix seconds", k);
            } else if (k == "group_by" || k == "group_by[]") {
              size_t pos = 0;
              while (pos <= v.size()) {
                size_t comma = v.find(',', pos);
                std::string g = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                if (g == "key" || g == "api_key_id") by_key = true;
                else if (g == "model") by_model = true;
                else return error_response(error_kind::invalid_request, "'group_by' must be key, model or both", k);
                if (comma == std::string::npos) break;
                pos = comma + 1;
              }
            } else if (k == "bucket_width") {
              if (v != "1d") return error_response(error_kind::invalid_request, "'bucket_width' must be 1d", k);
            } else {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          if (!start) return error_response(error_kind::invalid_request, "'start' (Unix seconds) is required", "start");
          int64_t start_ms = *start * 1000 / k_day_ms * k_day_ms;  // buckets are whole UTC days
          int64_t end_ms = end ? *end * 1000 : store::now_ms();
          if (end_ms <= start_ms) return error_response(error_kind::invalid_request, "'end' must be after 'start'", "end");
          if (end_ms - start_ms > 366 * k_day_ms)
            return error_response(error_kind::invalid_request, "at most 366 days per request", "end");
          if (deps.db_path.empty()) return error_response(error_kind::unavailable, "usage is not available on this server");
          json buckets = json::array();
          try {
            store::sqlite_db db(deps.db_path, 5000, true);
            // NOTE: finished jobs only (their usage is final); a deleted job keeps its usage totals
            // but not its request, so its model reads "".
            auto s = db.prepare(
                "SELECT j.finished_ms / ?4, CASE WHEN ?5 THEN COALESCE(k.key_id, '') ELSE '' END, "
                "CASE WHEN ?6 THEN COALESCE(json_extract(CASE WHEN json_valid(j.request_json) THEN j.request_json END, "
                "'$.model'), '') ELSE '' END, "
                "SUM(COALESCE(json_extract(CASE WHEN json_valid(j.usage_json) THEN j.usage_json END, '$.prompt_tokens'), 0)), "
                "SUM(COALESCE(json_extract(CASE WHEN json_valid(j.usage_json) THEN j.usage_json END, '$.cached_tokens'), 0)), "
                "SUM(COALESCE(json_extract(CASE WHEN json_valid(j.usage_json) THEN j.usage_json END, '$.completion_tokens'), 0)), "
                "COUNT(*) FROM jobs j LEFT JOIN job_keys k ON k.job_id = j.id "
                "WHERE j.tenant = ?1 AND j.finished_ms >= ?2 AND j.finished_ms < ?3 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
            s.bind_all(key.tenant, start_ms, end_ms, k_day_ms, int64_t(by_key), int64_t(by_model));
            std::map<int64_t, json> by_day;
            while (s.step()) {
              json res = {{"object", "organization.usage.completions.result"},
                          {"input_tokens", s.col_int(3)},
                          {"input_cached_tokens", s.col_int(4)},
                          {"output_tokens", s.col_int(5)},
                          {"num_model_requests", s.col_int(6)},
                          {"jobs", s.col_int(6)},
                          {"api_key_id", by_key ? json(s.col_text(1)) : json(nullptr)},
                          {"model", by_model ? json(s.col_text(2)) : json(nullptr)},
                          {"project_id", nullptr},
                          {"user_id", nullptr},
                          {"batch", nullptr}};
              by_day[s.col_int(0)].push_back(std::move(res));
            }
            for (int64_t day = start_ms / k_day_ms; day * k_day_ms < end_ms; ++day) {
              auto it = by_day.find(day);
              buckets.push_back({{"object", "bucket"},
                                 {"start_time", day * k_day_ms / 1000},
                                 {"end_time", (day + 1) * k_day_ms / 1000},
                                 {"results", it == by_day.end() ? json::array() : it->second}});
            }
          } catch (const std::exception& e) {
            spdlog::error("api: usage: {}", e.what());
            return error_response(error_kind::unavailable, "could not read usage right now; retry");
          }
          return json_response(200, {{"object", "page"}, {"data", buckets}, {"has_more", false}, {"next_page", nullptr}});
        }));
}

}  // namespace agentq::api
