// The one table from error kind to HTTP status and the JSON error body
// {"error":{"type","message","param"}}. Every 4xx/5xx the service sends comes from here.
#pragma once

#include <string>
#include <string_view>

#include "http/message.h"

namespace agentq::http {

enum class error_kind {
  invalid_request,      // 400 malformed JSON, wrong types, bad values
  authentication,       // 401
  permission,           // 403
  not_found,            // 404
  method_not_allowed,   // 405
  conflict,             // 409 idempotency key reuse with another body, state conflicts
  payload_too_large,    // 413
  unsupported_media,    // 415
  unprocessable,        // 422 well-formed but not runnable (prompt over context, bad schema)
  rate_limited,         // 429
  header_too_large,     // 431
  internal,             // 500
  not_implemented,      // 501
  unavailable,          // 503
  queue_full,           // 429 the queue is deeper than --max-queue-depth (type "queue_full", not a rate limit)
  insufficient_quota,   // 429 the tenant used its --tenant-tokens-per-day (OpenAI's type "insufficient_quota")
};

int status_of(error_kind kind);
const char* type_of(error_kind kind);  // the "type" string in the body

// {"error":{"type","message","param"}}; param omitted (null) when empty.
std::string error_body(error_kind kind, std::string_view message, std::string_view param = {});
response error_response(error_kind kind, std::string_view message, std::string_view param = {});

}  // namespace agentq::http
