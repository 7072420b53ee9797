// REST handlers (see api.h). Each handler: auth -> parse -> store -> job object.
#include "api/api.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/batch_routes.h"
#include "api/event_stream.h"
#include "api/queue_depth.h"
#include "api/tenant_quota.h"
#include "api/job_view.h"
#include "api/model_catalog.h"
#include "api/worker_routes.h"
#include "api/ui_routes.h"
#include "api/usage_routes.h"
#include "api/deletion_routes.h"
#include "api/observability_routes.h"
#include "api/reply.h"
#include "api/openai_routes.h"
#include "auth/keys.h"
#include "auth/rate_limiter.h"
#include "http/errors.h"
#include "store/store.h"
#include "util/crypto.h"
#include "webhooks/dispatcher.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;
using http::request;
using http::response;

namespace {

response job_not_found(const std::string& id) {
  return error_response(error_kind::not_found, "no job '" + id + "'", "id");
}

std::string bearer_of(const request& req) {
  std::string_view h = req.header_view("authorization");
  if (h.size() > 7 && (h.starts_with("Bearer ") || h.starts_with("bearer "))) return std::string(h.substr(7));
  return "";
}

json key_object(const auth::key_info& k) {
  return {{"id", k.id},
          {"object", "api_key"},
          {"tenant", k.tenant},
          {"prefix", k.prefix},
          {"admin", k.is_admin},
          {"created_at", double(k.created_ms) / 1000.0},
          {"revoked", k.revoked_ms > 0},
          {"retention_days", k.retention_days >= 0 ? json(k.retention_days) : json(nullptr)}};
}

std::optional<int64_t> parse_i64(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// POST /v1/jobs's answer to the store's create_job outcome.
// request: the submitted body as parsed (what the created job's request_json holds), or nullptr.
response submit_answer(const store::create_result& res, const json* request = nullptr) {
  switch (res.outcome) {
    case store::create_outcome::created:
      return json_text_response(202, job_json(res.job, nullptr, request));
    case store::create_outcome::existing:
      return json_text_response(200, job_json(res.job, nullptr));
    case store::create_outcome::conflict:
      return error_response(error_kind::conflict, "Idempotency-Key was already used with a different request body",
                            "Idempotency-Key");
    case store::create_outcome::error:
      break;
  }
  // NOTE: a failed store write is transient (disk full, database busy): 503 + Retry-After, so a
  // client retries (with its Idempotency-Key) rather than giving up as on a 500.
  spdlog::error("api: create_job failed: {}", res.error);
  response unavailable = error_response(error_kind::unavailable, "could not store the job right now; retry");
  unavailable.headers.emplace_back("Retry-After", "1");
  return unavailable;
}

}  // namespace

api::api(api_options options, api_deps deps) : options_(std::move(options)), deps_(std::move(deps)) {}

void api::install(http::router& r) {
  // Wrap a handler with auth + rate limit; the key reaches the handler.
  auto authed = [this](std::function<response(request&, const auth::key_info&)> fn) {
    return [this, fn = std::move(fn)](request& req) -> response {
      std::string token = bearer_of(req);
      std::optional<auth::key_info> key;
      if (!token.empty()) key = deps_.keys->authenticate(token);
      if (!key) {
        response res = error_response(error_kind::authentication,
                                      "missing or invalid API key (send 'Authorization: Bearer <key>')");
        res.headers.emplace_back("WWW-Authenticate", "Bearer");
        return res;
      }
      if (deps_.limiter) {
        if (int32_t wait_s = deps_.limiter->acquire(key->id); wait_s > 0) {
          response res = error_response(error_kind::rate_limited,
                                        "rate limit exceeded for this key; retry after " + std::to_string(wait_s) + "s");
          res.headers.emplace_back("Retry-After", std::to_string(wait_s));
          return res;
        }
      }
      // Back-pressure: a submit past --max-queue-depth is a 429 queue_full (POST /v1/batches checks
      // its whole file in its own handler).
      if (deps_.depth && req.method == "POST" &&
          (req.path == "/v1/jobs" || req.path == "/v1/chat/completions" || req.path == "/v1/responses")) {
        auto v = deps_.depth->admit(key->tenant, 1);
        if (!v.admitted) {
          response res = error_response(error_kind::queue_full, v.message);
          res.headers.emplace_back("Retry-After", std::to_string(v.retry_after_s));
          return res;
        }
      }
      // Quota: a tenant past --tenant-tokens-per-day gets 429 insufficient_quota on every submit.
      if (deps_.quota && req.method == "POST" &&
          (req.path == "/v1/jobs" || req.path == "/v1/chat/completions" || req.path == "/v1/responses" ||
           req.path == "/v1/batches")) {
        auto v = deps_.quota->admit(key->tenant, store::now_ms());
        if (!v.admitted) {
          response res = error_response(error_kind::insufficient_quota, v.message);
          res.headers.emplace_back("Retry-After", std::to_string(v.retry_after_s));
          return res;
        }
      }
      return fn(req, *key);
    };
  };
  auto admin_only = [](const auth::key_info& k) -> std::optional<response> {
    if (k.is_admin) return std::nullopt;
    return error_response(error_kind::permission, "this endpoint needs an admin key");
  };

  install_observability_routes(r, options_, deps_, authed);  // /metrics, engine stats, job timelines

  // NOTE: routes marked runs_on::io never block (memory, reads, a deferred write): they run on the
  // io thread that read the request; the rest run on the blocking pool (http/blocking_pool.h).
  r.add("GET", "/healthz", [](request&) { return json_response(200, {{"status", "ok"}}); }, http::runs_on::io);

  r.add("GET", "/readyz", [this](request&) {
    json checks = json::object();
    bool ok = true;
    for (auto& [name, fn] : deps_.ready_checks) {
      std::string why;
      bool good = fn(&why);
      checks[name] = good ? json{{"ok", true}} : json{{"ok", false}, {"error", why}};
      ok = ok && good;
    }
    return json_response(ok ? 200 : 503, {{"status", ok ? "ready" : "not_ready"}, {"checks", checks}});
  });

  r.add("GET", "/openapi.json", [](request&) {
    response res;
    res.body = openapi_json();
    return res;
  }, http::runs_on::io);

  r.add("GET", "/v1/models", authed([this](request&, const auth::key_info&) {
          // The fleet (#28): which live workers serve each model (their adverts); a known model no
          // live worker serves is still listed and accepted: its jobs wait (a "waiting" event says why).
          // A mixed fleet (CPU and CUDA workers behind one queue): "devices" counts them per model.
          std::map<std::string, json> served_by, devices_of;
          if (deps_.list_workers)
            for (const auto& text : deps_.list_workers()) {
              json w = json::parse(text, nullptr, false);
              if (!w.is_object() || !w.contains("models") || !w["models"].is_array()) continue;
              const std::string device = w.contains("device") && w["device"].is_string() ? w["device"].get<std::string>()
                                                                                          : "cpu";
              for (auto& m : w["models"])
                if (m.is_object() && m.contains("name") && m["name"].is_string()) {
                  const std::string name = m["name"].get<std::string>();
                  served_by[name].push_back(w.value("id", ""));
                  json& d = devices_of[name];
                  if (!d.is_object()) d = json::object();
                  d[device] = d.value(device, 0) + 1;
                }
            }
          json data = json::array();
          for (const auto& m : deps_.catalog->list()) {
            json workers = served_by.count(m.name) ? served_by[m.name] : json::array();
            json devices = devices_of.count(m.name) ? devices_of[m.name] : json::object();
            json one = {{"id", m.name}, {"object", "model"}, {"arch", m.arch}, {"context_length", m.n_ctx},
                        {"ready", m.ready}, {"chat_family", m.chat_family}, {"served", !workers.empty()},
                        {"workers", workers}, {"devices", devices}, {"source", m.source}};
            if (m.source == "fleet") one["last_seen_ms"] = m.last_seen_ms;  // --model-ttl-h counts from it
            data.push_back(std::move(one));
          }
          return json_response(200, {{"object", "list"}, {"data", data}});
        }));

  r.add("POST", "/v1/jobs", authed([this](request& req, const auth::key_info& key) {
          validation_error err;
          auto body = parse_body(req.body, req.header_view("content-type"), &err);
          if (!body) return from_validation(err);
          auto v = validate_job(*body, *deps_.catalog, *deps_.guard, options_.limits, &err);
          if (!v) return from_validation(err);
          store::new_job nj;
          nj.tenant = key.tenant;
          nj.request_json = body->dump();
          nj.priority = *store::parse_job_priority(v->priority);
          nj.store_content = v->store;
          nj.key_id = key.id;
          if (auto m = body->find("model"); m != body->end() && m->is_string()) nj.model = m->get<std::string>();
          if (v->deadline_seconds > 0) nj.deadline_ms = store::now_ms() + int64_t(v->deadline_seconds * 1000);
          std::string_view idem = req.header_view("idempotency-key");
          if (!idem.empty()) {
            if (idem.size() > 255)
              return error_response(error_kind::invalid_request, "Idempotency-Key is longer than 255 characters",
                                    "Idempotency-Key");
            nj.idempotency_key = idem;
            nj.request_hash = crypto::sha256_hex(nj.request_json);
          }
          // NOTE: deferred (issue 29): the HTTP thread hands the insert to the store's writer and goes
          // back to its connections; the 202 is made on the connection's io thread once the writer's
          // commit is durable, never before.
          response deferred;
          // The parsed body goes along for the 202 (job_json need not parse request_json again).
          auto parsed = std::make_shared<json>(std::move(*body));
          deferred.deferred = [store = deps_.store, nj = std::move(nj), parsed](http::reply_fn reply) mutable {
            store->create_job_async(std::move(nj), [reply = std::move(reply), parsed](store::create_result r) {
              auto made = std::make_shared<store::create_result>(std::move(r));
              reply([made, parsed] { return submit_answer(*made, parsed.get()); });
            });
          };
          return deferred;
        }), http::runs_on::io);

  r.add("GET", "/v1/jobs", authed([this](request& req, const auth::key_info& key) {
          std::optional<store::job_status> status;
          int32_t limit = 20;
          std::string before;
          std::vector<std::pair<std::string, std::string>> meta;
          for (auto& [k, v] : req.query_params()) {
            if (k == "status") {
              status = store::parse_job_status(v);
              if (!status) return error_response(error_kind::invalid_request, "unknown status '" + v + "'", "status");
            } else if (k == "limit") {
              auto n = parse_i64(v);
              if (!n || *n < 1 || *n > options_.max_list_limit)
                return error_response(error_kind::invalid_request,
                                      "limit must be 1-" + std::to_string(options_.max_list_limit), "limit");
              limit = int32_t(*n);
            } else if (k == "after" || k == "cursor") {
              // a cursor is a job id ("job_" + 24 hex, store/job_id.h, time-ordered)
              bool ok = v.size() == 28 && v.starts_with("job_") &&
                        std::all_of(v.begin() + 4, v.end(), [](char ch) { return std::isxdigit((unsigned char)ch); });
              if (!ok) return error_response(error_kind::invalid_request, "'" + k + "' must be a job id (job_...)", k);
              before = v;
            } else if (k.starts_with("metadata.") && k.size() > 9) {
              meta.emplace_back(k.substr(9), v);
            } else if (k.starts_with("metadata[") && k.back() == ']' && k.size() > 10) {
              meta.emplace_back(k.substr(9, k.size() - 10), v);
            } else {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          if (meta.empty()) {
            // NOTE: the page's text written from each job's (job_json: the same bytes as the object's
            // dump) without a document of the page: most of a list's CPU was building and dumping it.
            auto rows = deps_.store->list_jobs(key.tenant, status, limit + 1, before);
            const bool has_more = int32_t(rows.size()) > limit;
            if (has_more) rows.resize(size_t(limit));
            std::string body = "{\"data\":[";
            for (size_t i = 0; i < rows.size(); ++i) {
              if (i > 0) body += ',';
              body += job_json(rows[i], nullptr);
            }
            body += "],\"has_more\":";
            body += has_more ? "true" : "false";
            body += ",\"next_cursor\":";
            body += has_more && !rows.empty() ? json(rows.back().id).dump() : "null";
            body += ",\"object\":\"list\"}";
            return json_text_response(200, std::move(body));
          }
          json data = json::array();
          bool has_more = false;
          std::string cursor = before;
          // NOTE: metadata filters are applied here, over at most 20 pages of the tenant's jobs (a
          // job's object is made to read its metadata).
          for (int page = 0; page < 20 && !has_more; ++page) {
            auto rows = deps_.store->list_jobs(key.tenant, status, limit + 1, cursor);
            for (size_t i = 0; i < rows.size(); ++i) {
              const auto& row = rows[i];
              if (int32_t(data.size()) == limit) {
                has_more = true;
                break;
              }
              cursor = row.id;
              json obj = job_object(row, nullptr);
              bool match = true;
              for (auto& [mk, mv] : meta) {
                auto it = obj["metadata"].find(mk);
                match = match && it != obj["metadata"].end() && it->is_string() && it->get<std::string>() == mv;
              }
              if (match) data.push_back(std::move(obj));
            }
            if (int32_t(rows.size()) <= limit) break;  // the tenant's last page
          }
          json out = {{"object", "list"}, {"data", data}, {"has_more", has_more}};
          out["next_cursor"] = has_more && !data.empty() ? json(data.back()["id"]) : json(nullptr);
          return json_response(200, out);
        }));

  r.add("GET", "/v1/jobs/{id}", authed([this](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps_.store->get_job(id, key.tenant);
          if (!job) return job_not_found(id);
          auto transcript = deps_.store->read_transcript(id);
          return json_text_response(200, job_json(*job, &transcript));
        }), http::runs_on::io);

  r.add("POST", "/v1/jobs/{id}/cancel", authed([this](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps_.store->get_job(id, key.tenant);
          if (!job) return job_not_found(id);
          auto ws = deps_.store->cancel_job(id, key.tenant).get();
          job = deps_.store->get_job(id, key.tenant);
          if (ws == store::write_status::ok) return json_response(200, job_object(*job, nullptr));
          if (ws == store::write_status::not_found) return job_not_found(id);
          if (ws == store::write_status::fenced)
            return error_response(error_kind::conflict,
                                  "job '" + id + "' is already " + store::to_string(job->status) + " and cannot be cancelled");
          return error_response(error_kind::internal, "could not cancel the job; retry");
        }));

  r.add("POST", "/v1/jobs/{id}/tool_outputs", authed([this](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps_.store->get_job(id, key.tenant);
          if (!job) return job_not_found(id);
          validation_error err;
          auto body = parse_body(req.body, req.header("content-type"), &err);
          if (!body) return from_validation(err);
          if (!body->is_object() || !body->contains("tool_outputs") || !(*body)["tool_outputs"].is_array() ||
              (*body)["tool_outputs"].empty())
            return error_response(error_kind::invalid_request, "'tool_outputs' must be a non-empty array",
                                  "tool_outputs");
          std::vector<store::tool_output> outs;
          const json& arr = (*body)["tool_outputs"];
          for (size_t i = 0; i < arr.size(); ++i) {
            std::string p = "tool_outputs[" + std::to_string(i) + "]";
            const json& o = arr[i];
            if (!o.is_object() || !o.contains("tool_call_id") || !o["tool_call_id"].is_string())
              return error_response(error_kind::invalid_request, "'" + p + ".tool_call_id' must be a string",
                                    p + ".tool_call_id");
            if (!o.contains("output") || !o["output"].is_string())
              return error_response(error_kind::invalid_request, "'" + p + ".output' must be a string",
                                    p + ".output");
            bool is_error = o.contains("is_error") && o["is_error"].is_boolean() && o["is_error"].get<bool>();
            outs.push_back({o["tool_call_id"].get<std::string>(), o["output"].get<std::string>(), is_error});
          }
          auto ws = deps_.store->submit_tool_outputs(id, std::move(outs), key.tenant).get();
          switch (ws) {
            case store::write_status::ok: return json_response(200, job_object(*deps_.store->get_job(id, key.tenant), nullptr));
            case store::write_status::not_found: return job_not_found(id);
            case store::write_status::invalid:
              return error_response(error_kind::invalid_request,
                                    "tool_outputs must answer every pending tool call of the job, and only those",
                                    "tool_outputs");
            case store::write_status::fenced:
              return error_response(error_kind::conflict, "job '" + id + "' is " + store::to_string(job->status) +
                                                              ", not requires_action");
            default: return error_response(error_kind::internal, "could not record the tool outputs; retry");
          }
        }));

  r.add("GET", "/v1/jobs/{id}/events", authed([this](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps_.store->get_job(id, key.tenant);
          if (!job) return job_not_found(id);
          auto cursor = parse_event_cursor(req);
          if (cursor.error) return *cursor.error;
          int64_t after = cursor.after.value_or(0);
          if (!wants_sse(req)) return event_list_response(deps_.store->read_events(id, after, 1001), 1000);
          store::store* st = deps_.store;
          event_feed feed{[st, id](int64_t a, int32_t n) { return st->read_events(id, a, n); },
                          [st, id] {
                            auto j = st->get_job(id);
                            return !j || store::is_terminal(j->status);
                          }};
          return sse_response(st, std::move(feed), after, options_.sse_keepalive);
        }));

  r.add("GET", "/v1/jobs/{id}/webhooks", authed([this](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          if (!deps_.store->get_job(id, key.tenant)) return job_not_found(id);
          json data = json::array();
          if (deps_.webhooks) {
            for (const auto& d : deps_.webhooks->list(id)) {
              json attempts = json::array();
              for (const auto& a : d.attempts)
                attempts.push_back({{"attempt", a.attempt_idx},
                                    {"status_code", a.status_code ? json(a.status_code) : json(nullptr)},
                                    {"error", a.error.empty() ? json(nullptr) : json(a.error)},
                                    {"duration_ms", a.duration_ms},
                                    {"created_at", double(a.created_ms) / 1000.0}});
              data.push_back({{"id", d.id},
                              {"event", d.event_type},
                              {"url", d.url},
                              {"state", d.state},
                              {"n_attempts", d.n_attempts},
                              {"next_attempt_at", d.state == "pending" ? json(double(d.next_attempt_ms) / 1000.0)
                                                                       : json(nullptr)},
                              {"created_at", double(d.created_ms) / 1000.0},
                              {"attempts", attempts}});
            }
          }
          return json_response(200, {{"object", "list"}, {"data", data}});
        }));

  // --- keys ------------------------------------------------------------------
  r.add("POST", "/v1/keys", authed([this, admin_only](request& req, const auth::key_info& key) {
          if (auto denied = admin_only(key)) return *denied;
          validation_error err;
          auto body = parse_body(req.body.empty() ? "{}" : req.body, req.header("content-type"), &err);
          if (!body) return from_validation(err);
          if (!body->is_object() || !body->contains("tenant") || !(*body)["tenant"].is_string() ||
              (*body)["tenant"].get<std::string>().empty() || (*body)["tenant"].get<std::string>().size() > 128)
            return error_response(error_kind::invalid_request, "'tenant' must be a non-empty string", "tenant");
          bool admin = false;
          if (body->contains("admin")) {
            if (!(*body)["admin"].is_boolean())
              return error_response(error_kind::invalid_request, "'admin' must be a boolean", "admin");
            admin = (*body)["admin"].get<bool>();
          }
          int32_t retention_days = -1;  // the server's --retention-days
          if (auto rd = body->find("retention_days"); rd != body->end() && !rd->is_null()) {
            if (!rd->is_number_integer() || rd->get<int64_t>() < 0 || rd->get<int64_t>() > 36500)
              return error_response(error_kind::invalid_request, "'retention_days' must be an integer 0-36500 or null",
                                    "retention_days");
            retention_days = int32_t(rd->get<int64_t>());
          }
          std::string why;
          auto nk = deps_.keys->create((*body)["tenant"].get<std::string>(), admin, &why);
          if (!nk) return error_response(error_kind::internal, why);
          if (retention_days >= 0 && deps_.keys->set_retention_days(nk->info.id, retention_days))
            nk->info.retention_days = retention_days;
          json out = key_object(nk->info);
          out["key"] = nk->key;
          out["webhook_secret"] = nk->info.webhook_secret;
          spdlog::info("api: key {} created for tenant {} by {}", nk->info.id, nk->info.tenant, key.id);
          return json_response(201, out);
        }));

  r.add("GET", "/v1/keys", authed([this](request&, const auth::key_info& key) {
          json data = json::array();
          for (const auto& k : deps_.keys->list(key.is_admin ? std::string() : key.tenant)) data.push_back(key_object(k));
          return json_response(200, {{"object", "list"}, {"data", data}});
        }));

  auto key_action = [this](request& req, const auth::key_info& key, bool rotate) -> response {
    std::string id = req.path_param("id");
    auto target = deps_.keys->get(id);
    if (!target || (!key.is_admin && target->tenant != key.tenant))
      return error_response(error_kind::not_found, "no key '" + id + "'", "id");
    if (rotate) {
      auto secret = deps_.keys->rotate_secret(id);
      if (!secret) return error_response(error_kind::conflict, "key '" + id + "' is revoked");
      json out = key_object(*target);
      out["webhook_secret"] = *secret;
      return json_response(200, out);
    }
    if (!deps_.keys->revoke(id)) return error_response(error_kind::conflict, "key '" + id + "' is already revoked");
    return json_response(200, key_object(*deps_.keys->get(id)));
  };
  r.add("POST", "/v1/keys/{id}/revoke",
        authed([key_action](request& req, const auth::key_info& key) { return key_action(req, key, false); }));
  r.add("POST", "/v1/keys/{id}/rotate_secret",
        authed([key_action](request& req, const auth::key_info& key) { return key_action(req, key, true); }));

  install_ui_routes(r, options_, deps_, authed);          // /ui dashboard, GET /v1/events
  install_deletion_routes(r, deps_, authed, admin_only);  // DELETE /v1/jobs/{id}, DELETE /v1/tenants/{tenant}
  install_worker_routes(r, deps_, authed, admin_only);    // GET /v1/workers (admin)
  install_openai_routes(r, options_, deps_, authed);      // /v1/chat/completions, /v1/responses, webhook endpoints
  install_batch_routes(r, options_, deps_, authed);       // /v1/files, /v1/batches
  install_usage_routes(r, deps_, authed);                 // /v1/usage
}

}  // namespace agentq::api
