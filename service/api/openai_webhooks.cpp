// OpenAI-shaped webhook endpoints (see openai_routes.h): a key's tenant registers URLs that get
// response.completed / .failed / .cancelled / .incomplete events, signed with the key's whsec_ secret.
#include <nlohmann/json.hpp>

#include "api/openai_registry.h"
#include "api/openai_routes.h"
#include "api/reply.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "net/ssrf_guard.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;
using http::request;
using http::response;

namespace {
json endpoint_object(const webhook_endpoint& e) {
  return {{"id", e.id}, {"object", "webhook_endpoint"}, {"url", e.url}, {"events", e.events},
          {"created_at", e.created_ms / 1000},
          {"signing_secret", "the API key's webhook_secret (whsec_...), as for job webhooks"}};
}
}  // namespace

void install_openai_webhook_routes(http::router& r, const api_deps& deps, const authed_wrap& authed) {
  auto unavailable = [] {
    return error_response(error_kind::unavailable, "webhook endpoints are not available on this server");
  };
  r.add("POST", "/v1/webhook_endpoints", authed([deps, unavailable](request& req, const auth::key_info& key) {
          if (!deps.openai) return unavailable();
          validation_error err;
          auto body = parse_body(req.body, req.header("content-type"), &err);
          if (!body) return error_response(err.kind, err.message, err.param);
          if (!body->is_object()) return error_response(error_kind::invalid_request, "the request body must be a JSON object");
          for (auto it = body->begin(); it != body->end(); ++it)
            if (it.key() != "url" && it.key() != "events")
              return error_response(error_kind::invalid_request, "unknown field '" + it.key() + "'", it.key());
          auto url = body->find("url");
          if (url == body->end() || !url->is_string() || url->get<std::string>().empty())
            return error_response(error_kind::invalid_request, "'url' must be a non-empty string", "url");
          std::string why;
          if (!deps.guard->check(url->get<std::string>(), &why))
            return error_response(error_kind::invalid_request, "'url' is not an allowed URL: " + why, "url");
          std::vector<std::string> events = {"response.completed", "response.failed", "response.cancelled",
                                             "response.incomplete"};
          if (auto ev = body->find("events"); ev != body->end() && !ev->is_null()) {
            if (!ev->is_array() || ev->empty())
              return error_response(error_kind::invalid_request, "'events' must be a non-empty array", "events");
            events.clear();
            for (size_t i = 0; i < ev->size(); ++i) {
              std::string p = "events[" + std::to_string(i) + "]";
              if (!(*ev)[i].is_string() || !is_response_webhook_event((*ev)[i].get<std::string>()))
                return error_response(error_kind::invalid_request,
                                      "'" + p + "' must be one of response.completed, response.failed, "
                                      "response.cancelled, response.incomplete, batch.completed, batch.failed, "
                                      "batch.cancelled, batch.expired", p);
              events.push_back((*ev)[i].get<std::string>());
            }
          }
          auto e = deps.openai->add_endpoint(key.tenant, url->get<std::string>(), std::move(events));
          if (!e) return error_response(error_kind::internal, "could not store the endpoint; retry");
          return json_response(201, endpoint_object(*e));
        }));
  r.add("GET", "/v1/webhook_endpoints", authed([deps](request&, const auth::key_info& key) {
          json data = json::array();
          if (deps.openai)
            for (const auto& e : deps.openai->list_endpoints(key.tenant)) data.push_back(endpoint_object(e));
          return json_response(200, {{"object", "list"}, {"data", data}, {"has_more", false}});
        }));
  r.add("GET", "/v1/webhook_endpoints/{id}", authed([deps](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto e = deps.openai ? deps.openai->get_endpoint(id, key.tenant) : std::nullopt;
          if (!e) return error_response(error_kind::not_found, "no webhook endpoint '" + id + "'", "id");
          return json_response(200, endpoint_object(*e));
        }));
  r.add("DELETE", "/v1/webhook_endpoints/{id}", authed([deps](request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          if (!deps.openai || !deps.openai->remove_endpoint(id, key.tenant))
            return error_response(error_kind::not_found, "no webhook endpoint '" + id + "'", "id");
          return json_response(200, {{"id", id}, {"object", "webhook_endpoint"}, {"deleted", true}});
        }));
}

}  // namespace agentq::api
