// json_text's document_text (issue 29: the stored spec of every chat completion and Batch line) writes
// a document byte for byte as nlohmann's dump(): fixed cases for each kind of value and string
// escape, then 3,000 random documents (nested objects and arrays, keys and strings with quotes,
// backslashes, control characters, DEL and multi-byte UTF-8, integers at their limits, doubles
// of every magnitude), each also through a parse of its own text.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "api/json_text.h"
#include "random_json.h"

using json = nlohmann::json;

using agentq::test::random_string;
using agentq::test::random_value;

TEST_CASE("document_text: each kind of value and escape as dump writes it") {
  const json cases[] = {
      nullptr,
      true,
      json::object(),
      json::array(),
      json::parse(R"({"b":[1,-2,3.5,1e300,"x"],"a":{"z":null,"y":false},"":"","k\"ey":"v\u0000\u001f\\"})"),
      json{{"messages", {{{"role", "system"}, {"content", "You summarise documents."}}}}, {"max_tokens", 1}},
      json(std::numeric_limits<int64_t>::min()),
      json(std::numeric_limits<uint64_t>::max()),
      json(std::nan("")),
      json(-0.0),
      json("tab\there, quote\" backslash\\ DEL\x7f é 𝄞"),
  };
  for (const auto& j : cases) {
    INFO(j.dump());
    CHECK(agentq::api::document_text(j) == j.dump());
  }
}

TEST_CASE("document_text: 3,000 random documents and their parses as dump writes them") {
  std::mt19937_64 rng(29);
  for (int i = 0; i < 3000; ++i) {
    json j = random_value(rng, 0);
    const std::string want = j.dump();
    REQUIRE(agentq::api::document_text(j) == want);
    json back = json::parse(want);
    REQUIRE(agentq::api::document_text(back) == back.dump());
  }
}
