// Deeply nested JSON (found by fuzzing the job validation path): json_depth() measures it,
// parse_body refuses it with a 400 instead of letting a later dump() overflow the stack,
// and tool_calls arguments nested too deep are refused by validation.
#include "util/json_depth.h"

#include <doctest/doctest.h>

#include "api/validate.h"

using namespace agentq;

TEST_CASE("json_depth") {
  CHECK(util::json_depth("") == 0);
  CHECK(util::json_depth("1") == 0);
  CHECK(util::json_depth("{}") == 1);
  CHECK(util::json_depth(R"({"a":[1,{"b":[]}]})") == 4);
  CHECK(util::json_depth(R"({"a":"[[[[{{{{"})") == 1);  // brackets inside strings do not count
  CHECK(util::json_depth(R"({"a":"\"[[[["})") == 1);    // nor after an escaped quote
  CHECK(util::json_depth(R"(["\\",[[]]])") == 3);       // an escaped backslash ends the escape
  CHECK(util::json_depth("]]]][[") == 2);               // malformed: measured as far as it goes
  CHECK(util::json_depth(std::string(100000, '[')) == 100000);
}

TEST_CASE("parse_body refuses deep nesting (stack overflow in dump() before the fix)") {
  api::validation_error err;
  // 100k levels crashed agentqd (SIGSEGV in nlohmann::json::dump from validate_job's tool size check)
  for (int n : {util::k_max_json_depth + 1, 100000}) {
    std::string body =
        R"({"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"t","parameters":{"a":)" +
        std::string(size_t(n), '[') + std::string(size_t(n), ']') + "}}}]}";
    CHECK_FALSE(api::parse_body(body, &err));
    CHECK(err.kind == http::error_kind::invalid_request);
    CHECK(err.message.find("deeper than") != std::string::npos);
  }
  std::string ok = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  CHECK(api::parse_body(ok, &err));
}
