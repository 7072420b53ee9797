// Replays of inputs the job-validation fuzzer (tests/fuzz/fuzz_svc_validate.cpp) found: each
// must now be a clean 400 from parse_body / validate_job instead of an escaping exception.
#include <doctest/doctest.h>

#include "api/validate.h"

using namespace agentq;

TEST_CASE("a number out of double range is a 400, not an escaping json::out_of_range") {
  // fuzz_svc_validate crash 3488f138: nlohmann throws out_of_range.406 (not parse_error) for
  // 1e400; parse_body caught only parse_error, so POST /v1/jobs answered 500.
  for (const char* body : {R"({"model":7,"messages":{},"top_k":1e400})", "[1e400]", "-1e999", R"({"a":1E+400})"}) {
    api::validation_error err;
    CHECK_FALSE(api::parse_body(body, &err));
    CHECK(err.kind == http::error_kind::invalid_request);
    CHECK(err.message.starts_with("invalid JSON"));
    CHECK(err.message.find("json.exception") == std::string::npos);  // no parser codes (#24 item 10)
  }
}
