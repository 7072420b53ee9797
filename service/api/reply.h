// The JSON answers the API's routes share: a status with a JSON document, and a validation error
// through the one error table (http/errors.h). Header-only; included by api.cpp and the OpenAI routes.
#pragma once

#include <nlohmann/json.hpp>

#include "api/validate.h"
#include "http/errors.h"
#include "http/message.h"

namespace agentq::api {

// NOTE: invalid UTF-8 in a stored string (a model's cut multi-byte character) becomes U+FFFD
// instead of throwing while the response is written.
inline http::response json_response(int status, const nlohmann::json& body) {
  http::response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

// A JSON document already written as text (job_json).
inline http::response json_text_response(int status, std::string body) {
  http::response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

inline http::response from_validation(const validation_error& e) {
  return http::error_response(e.kind, e.message, e.param);
}

}  // namespace agentq::api
