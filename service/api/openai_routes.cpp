// OpenAI-compatible routes (see openai_routes.h): each request becomes a job on the same store,
// queue and engine as POST /v1/jobs; answers and streams are read back from the job's row,
// transcript and durable event log.
#include "api/openai_routes.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/json_text.h"
#include "api/openai_map.h"
#include "api/openai_registry.h"
#include "api/openai_stream.h"
#include "api/reply.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "ops/retention.h"
#include "store/store.h"
#include "util/crypto.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;
using http::request;
using http::response;

namespace {

// The job's insert (Idempotency-Key honoured as on POST /v1/jobs); nullopt and *error for a bad key.
std::optional<store::new_job> new_job_of(const auth::key_info& key, const request& req, const openai_job& j,
                                         response* error) {
  store::new_job nj;
  nj.tenant = key.tenant;
  nj.request_json = document_text(j.spec);
  nj.priority = *store::parse_job_priority(j.spec.value("priority", "normal"));
  nj.key_id = key.id;
  if (auto m = j.spec.find("model"); m != j.spec.end() && m->is_string()) nj.model = m->get<std::string>();
  std::string idem = req.header("idempotency-key");
  if (!idem.empty()) {
    if (idem.size() > 255) {
      *error = error_response(error_kind::invalid_request, "Idempotency-Key is longer than 255 characters",
                              "Idempotency-Key");
      return std::nullopt;
    }
    nj.idempotency_key = idem;
    nj.request_hash = crypto::sha256_hex(nj.request_json);
  }
  return nj;
}

// The insert's outcome: the row (new, or the Idempotency-Key's existing one), or the error response.
std::optional<store::job_row> row_of(const store::create_result& res, response* error) {
  switch (res.outcome) {
    case store::create_outcome::created: return res.job;
    case store::create_outcome::existing: return res.job;
    case store::create_outcome::conflict:
      *error = error_response(error_kind::conflict, "Idempotency-Key was already used with a different request body",
                              "Idempotency-Key");
      return std::nullopt;
    case store::create_outcome::error: break;
  }
  spdlog::error("api: create_job failed: {}", res.error);
  *error = error_response(error_kind::unavailable, "could not store the request right now; retry");
  error->headers.emplace_back("Retry-After", "1");
  return std::nullopt;
}

// NOTE: deferred (issue 29), as POST /v1/jobs: the insert goes to the store's writer and the io thread
// back to its other connections; `answer` makes the response from the committed row on the
// connection's io thread once the commit is durable, never before (a stream or a wait it returns
// then runs on its own thread, as before). `answer` must not block.
response deferred_submit(store::store* st, store::new_job nj, std::function<response(const store::job_row&)> answer) {
  response deferred;
  deferred.deferred = [st, nj = std::move(nj), answer = std::move(answer)](http::reply_fn reply) mutable {
    st->create_job_async(std::move(nj), [reply = std::move(reply), answer](store::create_result r) {
      auto made = std::make_shared<store::create_result>(std::move(r));
      reply([made, answer] {
        response error;
        auto row = row_of(*made, &error);
        return row ? answer(*row) : error;
      });
    });
  };
  return deferred;
}

// Follow one job's durable events from the start, handing each to on_event (true = the stream
// is finished). Writes `keepalive_text` after `keepalive` of silence. false when the client went.
bool follow_job(store::store* st, const std::string& job_id, http::stream_sink& out,
                std::chrono::milliseconds keepalive, const std::string& keepalive_text,
                const std::function<bool(const store::job_event&)>& on_event) {
  int64_t after = 0;
  auto last_write = std::chrono::steady_clock::now();
  while (!out.closed()) {
    int64_t mark = st->last_event_id();
    auto events = st->read_events(job_id, after, 256);
    for (const auto& e : events) {
      after = e.id;
      if (on_event(e)) return true;
      last_write = std::chrono::steady_clock::now();
    }
    if (out.closed()) return false;
    if (!events.empty()) continue;
    if (!st->get_job(job_id)) return true;  // deleted under us
    st->wait_events(mark, std::chrono::milliseconds(500));
    if (std::chrono::steady_clock::now() - last_write > keepalive) {
      if (!out.write(keepalive_text)) return false;
      last_write = std::chrono::steady_clock::now();
    }
  }
  return false;
}

bool is_terminal_status_event(const store::job_event& e) {
  if (e.type != "status") return false;
  auto d = json::parse(e.data_json, nullptr, false);
  if (!d.is_object()) return false;
  auto s = store::parse_job_status(d.value("status", ""));
  return s && store::is_terminal(*s);
}

// A foreground request's client went away: its job goes too (as OpenAI cancels a dropped
// non-background response).
void cancel_abandoned(store::store* st, const std::string& job_id) {
  auto j = st->get_job(job_id);
  if (j && !store::is_terminal(j->status)) {
    spdlog::info("api: client left; cancelling foreground job {}", job_id);
    st->cancel_job(job_id).get();
  }
}

stream_source source_for(store::store* st, const std::string& job_id, bool chat) {
  stream_source s;
  s.transcript = [st, job_id] { return st->read_transcript(job_id); };
  s.object = [st, job_id, chat]() -> json {
    auto j = st->get_job(job_id);
    if (!j) return json::object();
    auto t = st->read_transcript(job_id);
    return chat ? chat_completion_object(*j, t) : response_object(*j, t);
  };
  return s;
}

// The answer once the job is over, written as the body of a 200 (held open with JSON
// whitespace meanwhile, so no io thread blocks while the model runs).
response wait_and_answer(store::store* st, std::string job_id, bool chat, std::chrono::milliseconds keepalive) {
  response res;
  res.stream = [st, job_id, chat, keepalive](http::stream_sink& out) {
    bool over = follow_job(st, job_id, out, keepalive, " ", is_terminal_status_event);
    if (!over) return cancel_abandoned(st, job_id);
    auto j = st->get_job(job_id);
    if (!j) return;
    auto t = st->read_transcript(job_id);
    json body;
    if (chat && (j->status == store::job_status::failed || j->status == store::job_status::cancelled))
      body = {{"error", {{"type", "server_error"}, {"message", j->error.empty() ? "the completion " + std::string(store::to_string(j->status)) : j->error}, {"param", nullptr}, {"code", store::to_string(j->status)}}}};
    else
      body = chat ? chat_completion_object(*j, t) : response_object(*j, t);
    out.write(body.dump(-1, ' ', false, json::error_handler_t::replace));
  };
  return res;
}

response sse(std::function<void(http::stream_sink&)> fn) {
  response res;
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = std::move(fn);
  return res;
}

// A Responses event stream for a job: every event with sequence_number > starting_after.
response response_stream(store::store* st, std::string job_id, int64_t starting_after, bool cancel_on_leave,
                         std::chrono::milliseconds keepalive) {
  return sse([=](http::stream_sink& out) {
    response_stream_builder b(response_id_of(job_id), source_for(st, job_id, false));
    bool over = follow_job(st, job_id, out, keepalive, ": keep-alive\n\n", [&](const store::job_event& e) {
      for (const auto& ev : b.feed(e)) {
        if (ev["sequence_number"].get<int64_t>() <= starting_after) continue;
        if (!out.write(responses_sse_frame(ev))) return true;
      }
      return b.done();
    });
    if ((!over || out.closed()) && cancel_on_leave) cancel_abandoned(st, job_id);
  });
}

std::optional<int64_t> parse_nonneg(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

void install_openai_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed) {
  auto keepalive = options.sse_keepalive;

  // The stored response behind an id, for this key's tenant; nullopt -> 404.
  auto find_response = [deps](const std::string& id, const auth::key_info& key) -> std::optional<store::job_row> {
    auto job_id = job_id_of_response(id);
    if (!job_id) return std::nullopt;
    auto j = deps.store->get_job(*job_id, key.tenant);
    if (!j || openai_surface(*j) != "responses") return std::nullopt;
    if (deps.openai && deps.openai->is_deleted(*job_id)) return std::nullopt;
    return j;
  };
  auto not_found = [](const std::string& id) {
    return error_response(error_kind::not_found, "no response '" + id + "'", "id");
  };

  r.add("POST", "/v1/chat/completions", authed([deps, options, keepalive](request& req, const auth::key_info& key) {
          validation_error err;
          auto body = parse_body(req.body, req.header("content-type"), &err);
          if (!body) return from_validation(err);
          auto j = map_chat_request(*body, *deps.catalog, *deps.guard, options.limits, &err);
          if (!j) return from_validation(err);
          response error;
          auto nj = new_job_of(key, req, *j, &error);
          if (!nj) return error;
          store::store* st = deps.store;
          const bool stream = j->stream, usage = j->include_usage;
          std::string model = j->spec.value("model", "");
          return deferred_submit(st, std::move(*nj), [st, stream, usage, model, keepalive](const store::job_row& row) {
            std::string job_id = row.id;
            if (!stream) return wait_and_answer(st, job_id, true, keepalive);
            int64_t created = row.created_ms / 1000;
            return sse([=](http::stream_sink& out) {
              chat_stream_builder b(chat_id_of(job_id), model, created, usage, source_for(st, job_id, true));
              bool over = follow_job(st, job_id, out, keepalive, ": keep-alive\n\n", [&](const store::job_event& e) {
                for (const auto& payload : b.feed(e))
                  if (!out.write(chat_sse_frame(payload))) return true;
                return b.done();
              });
              if (!over || out.closed()) cancel_abandoned(st, job_id);
            });
          });
        }), http::runs_on::io);

  r.add("POST", "/v1/responses", authed([deps, options, keepalive, find_response](request& req, const auth::key_info& key) {
          validation_error err;
          auto body = parse_body(req.body, req.header("content-type"), &err);
          if (!body) return from_validation(err);
          std::optional<response_chain> chain;
          if (body->is_object()) {
            if (auto p = body->find("previous_response_id"); p != body->end() && !p->is_null()) {
              if (!p->is_string())
                return error_response(error_kind::invalid_request, "'previous_response_id' must be a string",
                                      "previous_response_id");
              std::string pid = p->get<std::string>();
              auto prev = find_response(pid, key);
              if (!prev)
                return error_response(error_kind::not_found, "no response '" + pid + "'", "previous_response_id");
              json preq = json::parse(prev->request_json, nullptr, false);
              if (preq.is_object() && !preq["openai"].value("store", true))
                return error_response(error_kind::invalid_request,
                                      "response '" + pid + "' was created with store: false and cannot be continued",
                                      "previous_response_id");
              if (prev->status != store::job_status::completed && prev->status != store::job_status::incomplete)
                return error_response(error_kind::invalid_request,
                                      "response '" + pid + "' is " + response_status(prev->status) +
                                          "; only a completed or incomplete response can be continued",
                                      "previous_response_id");
              chain = response_chain{pid, chain_messages(*prev, deps.store->read_transcript(prev->id)),
                                     preq.is_object() ? preq.value("kv_chain", prev->id) : prev->id};
            }
          }
          auto j = map_response_request(*body, chain ? &*chain : nullptr, *deps.catalog, *deps.guard, options.limits, &err);
          if (!j) return from_validation(err);
          response error;
          auto nj = new_job_of(key, req, *j, &error);
          if (!nj) return error;
          const bool stream = j->stream, background = j->background;
          return deferred_submit(deps.store, std::move(*nj),
                                 [st = deps.store, stream, background, keepalive](const store::job_row& row) {
                                   if (stream) return response_stream(st, row.id, -1, !background, keepalive);
                                   if (background) return json_response(200, response_object(row, {}));
                                   return wait_and_answer(st, row.id, false, keepalive);
                                 });
        }), http::runs_on::io);

  r.add("GET", "/v1/responses/{id}", authed([deps, keepalive, find_response, not_found](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          bool stream = false;
          int64_t starting_after = -1;
          for (auto& [k, v] : req.query_params()) {
            if (k == "stream") {
              if (v != "true" && v != "false")
                return error_response(error_kind::invalid_request, "'stream' must be true or false", "stream");
              stream = v == "true";
            } else if (k == "starting_after") {
              auto n = parse_nonneg(v);
              if (!n)
                return error_response(error_kind::invalid_request, "'starting_after' must be a non-negative integer",
                                      "starting_after");
              starting_after = *n;
            } else if (k == "include" || k == "include[]") {
              return error_response(error_kind::invalid_request, "'include' is not supported by agentq; see docs/openai.md",
                                    "include");
            } else {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          if (starting_after >= 0 && !stream)
            return error_response(error_kind::invalid_request, "'starting_after' needs stream=true", "starting_after");
          auto job = find_response(id, key);
          if (!job) return not_found(id);
          if (stream) return response_stream(deps.store, job->id, starting_after, false, keepalive);
          return json_response(200, response_object(*job, deps.store->read_transcript(job->id)));
        }), http::runs_on::io);

  r.add("POST", "/v1/responses/{id}/cancel", authed([deps, find_response, not_found](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = find_response(id, key);
          if (!job) return not_found(id);
          json preq = json::parse(job->request_json, nullptr, false);
          if (!preq.is_object() || !preq["openai"].value("background", false))
            return error_response(error_kind::invalid_request, "only background responses can be cancelled", "id");
          auto ws = deps.store->cancel_job(job->id, key.tenant).get();
          job = deps.store->get_job(job->id, key.tenant);
          if (!job) return not_found(id);
          if (ws == store::write_status::ok || job->status == store::job_status::cancelled)
            return json_response(200, response_object(*job, deps.store->read_transcript(job->id)));
          if (ws == store::write_status::fenced)
            return error_response(error_kind::conflict, "response '" + id + "' is already " +
                                                            response_status(job->status) + " and cannot be cancelled", "id");
          return error_response(error_kind::internal, "could not cancel the response; retry");
        }));

  r.add("DELETE", "/v1/responses/{id}", authed([deps, find_response, not_found](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = find_response(id, key);
          if (!job) return not_found(id);
          // NOTE: #33's deletion, as DELETE /v1/jobs/{id}: a live job is cancelled first, then the job
          // becomes a tombstone (content gone, every route 404s) and its KV is released.
          if (!store::is_terminal(job->status) &&
              deps.store->cancel_job(job->id, key.tenant).get() == store::write_status::error)
            return error_response(error_kind::unavailable, "could not cancel the response; retry");
          switch (deps.store->delete_job(job->id, key.tenant).get()) {
            case store::write_status::ok:
              ops::count_deleted("request", 1);
              if (deps.on_job_deleted) deps.on_job_deleted(job->id);
              spdlog::info("api: response {} (job {}) deleted by key {}", id, job->id, key.id);
              return json_response(200, {{"id", id}, {"object", "response"}, {"deleted", true}});
            case store::write_status::not_found: return not_found(id);
            case store::write_status::fenced:
              return error_response(error_kind::conflict, "response '" + id + "' is not terminal yet; retry");
            default: return error_response(error_kind::unavailable, "could not delete the response; retry");
          }
        }));

  r.add("GET", "/v1/responses/{id}/input_items", authed([deps, find_response, not_found](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          int64_t limit = 20;
          std::string order = "desc", after, before;
          for (auto& [k, v] : req.query_params()) {
            if (k == "limit") {
              auto n = parse_nonneg(v);
              if (!n || *n < 1 || *n > 100)
                return error_response(error_kind::invalid_request, "'limit' must be 1-100", "limit");
              limit = *n;
            } else if (k == "order") {
              if (v != "asc" && v != "desc")
                return error_response(error_kind::invalid_request, "'order' must be asc or desc", "order");
              order = v;
            } else if (k == "after") {
              after = v;
            } else if (k == "before") {
              before = v;
            } else if (k == "include" || k == "include[]") {
              return error_response(error_kind::invalid_request, "'include' is not supported by agentq; see docs/openai.md",
                                    "include");
            } else {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          auto job = find_response(id, key);
          if (!job) return not_found(id);
          json items = response_input_items(*job);
          std::vector<json> list(items.begin(), items.end());
          if (order == "desc") std::reverse(list.begin(), list.end());
          size_t start = 0, end = list.size();
          auto index_of = [&](const std::string& item_id) -> std::optional<size_t> {
            for (size_t i = 0; i < list.size(); ++i)
              if (list[i].value("id", "") == item_id) return i;
            return std::nullopt;
          };
          if (!after.empty()) {
            auto i = index_of(after);
            if (!i) return error_response(error_kind::invalid_request, "'after' names no input item of '" + id + "'", "after");
            start = *i + 1;
          }
          if (!before.empty()) {
            auto i = index_of(before);
            if (!i) return error_response(error_kind::invalid_request, "'before' names no input item of '" + id + "'", "before");
            end = std::min(end, *i);
          }
          json data = json::array();
          for (size_t i = start; i < end && int64_t(data.size()) < limit; ++i) data.push_back(list[i]);
          bool has_more = start + data.size() < end;
          return json_response(200, {{"object", "list"},
                                     {"data", data},
                                     {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
                                     {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
                                     {"has_more", has_more}});
        }));

  install_openai_webhook_routes(r, deps, authed);
}

}  // namespace agentq::api
