// Error kind -> status, type, JSON body (see errors.h).
#include "http/errors.h"

#include <nlohmann/json.hpp>

namespace agentq::http {

namespace {
struct row {
  error_kind kind;
  int status;
  const char* type;
};
constexpr row k_table[] = {
    {error_kind::invalid_request, 400, "invalid_request_error"},
    {error_kind::authentication, 401, "authentication_error"},
    {error_kind::permission, 403, "permission_error"},
    {error_kind::not_found, 404, "not_found_error"},
    {error_kind::method_not_allowed, 405, "method_not_allowed"},
    {error_kind::conflict, 409, "conflict_error"},
    {error_kind::payload_too_large, 413, "payload_too_large"},
    {error_kind::unsupported_media, 415, "unsupported_media_type"},
    {error_kind::unprocessable, 422, "unprocessable_error"},
    {error_kind::rate_limited, 429, "rate_limit_error"},
    {error_kind::header_too_large, 431, "header_too_large"},
    {error_kind::internal, 500, "internal_error"},
    {error_kind::not_implemented, 501, "not_implemented"},
    {error_kind::unavailable, 503, "unavailable"},
    {error_kind::queue_full, 429, "queue_full"},
    {error_kind::insufficient_quota, 429, "insufficient_quota"},
};
const row& lookup(error_kind kind) {
  for (const row& r : k_table)
    if (r.kind == kind) return r;
  return k_table[11];
}
}  // namespace

int status_of(error_kind kind) { return lookup(kind).status; }
const char* type_of(error_kind kind) { return lookup(kind).type; }

std::string error_body(error_kind kind, std::string_view message, std::string_view param) {
  nlohmann::json e = {{"type", type_of(kind)}, {"message", std::string(message)}, {"param", nullptr}};
  if (!param.empty()) e["param"] = std::string(param);
  // NOTE: replace, so a message quoting bad client bytes can never make dump() throw.
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

response error_response(error_kind kind, std::string_view message, std::string_view param) {
  response r;
  r.status = status_of(kind);
  r.body = error_body(kind, message, param);
  return r;
}

}  // namespace agentq::http
