// Validation of POST /v1/jobs bodies: JSON shape and types, limits, webhook URL (SSRF
// guard), then the engine's own check (schemas compile, prompt fits the context).
// Produces the engine turn_request the first turn will run and the error naming the field.
#pragma once

#include <optional>
#include <string>

#include <agentq/engine.h>
#include <nlohmann/json.hpp>

#include "http/errors.h"

namespace agentq::net {
class ssrf_guard;
}

namespace agentq::api {

class model_catalog;

struct validation_error {
  http::error_kind kind = http::error_kind::invalid_request;
  std::string message;
  std::string param;  // the offending field, e.g. "messages[2].role", "tools[0].function.parameters"
};

struct validation_limits {
  int32_t max_messages = 1024;
  int32_t max_tools = 64;
  size_t max_tool_bytes = 32 << 10;     // one tool definition, serialized
  int32_t max_metadata_keys = 16;
  size_t max_metadata_value = 512;      // characters
  int32_t max_turns = 256;
  double max_deadline_seconds = 7 * 24 * 3600;
};

struct validated_job {
  std::string model;
  turn_request first_turn;      // what the engine would run first (validation only)
  std::string priority = "normal";
  double deadline_seconds = 0;  // 0 = none
  std::optional<std::string> webhook_url;
  bool store = true;            // false: content deleted once the result webhook is delivered (issue 33)
};

// true if s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Parse the raw body; nullopt with *err (400) when content_type names a non-JSON media type
// (empty is accepted), or (400) on malformed JSON, a key repeated in one object or bad UTF-8.
// Messages say what and where ("invalid JSON at byte 17: ..."), never the parser's own codes.
std::optional<nlohmann::json> parse_body(const std::string& body, std::string_view content_type,
                                         validation_error* err);
inline std::optional<nlohmann::json> parse_body(const std::string& body, validation_error* err) {
  return parse_body(body, {}, err);
}

// Validate a parsed job request. The guard checks webhook and tool URLs; catalog checks the model.
std::optional<validated_job> validate_job(const nlohmann::json& body, const model_catalog& catalog,
                                          const net::ssrf_guard& guard, const validation_limits& limits,
                                          validation_error* err);

// Names of the webhook events a job can emit.
bool is_webhook_event(const std::string& name);

}  // namespace agentq::api
