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

using json = nlohmann::json;

namespace {

std::string random_string(std::mt19937_64& rng) {
  static const std::string pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\r", "\b", "\f", std::string(1, '\0'),
                                       "\x01", "\x1f", "\x7f", "é", "€", "𝄞", "日本", "{}", "[", ":", ",", "\\u0041"};
  std::string s;
  for (int n = int(rng() % 12); n > 0; --n) s += pieces[rng() % std::size(pieces)];
  return s;
}

json random_value(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth < 4 ? 9 : 7)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return int64_t(rng()) >> (rng() % 64);
    case 3: return uint64_t(rng());
    case 4: {
      static const double fixed[] = {0.0, -0.0, 1.0, 0.1, 1e300, 1e-300, 5e-324, 123456789.125, -2.5,
                                     std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()};
      if (rng() % 2) return fixed[rng() % std::size(fixed)];
      double d;
      uint64_t bits = rng();
      std::memcpy(&d, &bits, sizeof d);
      return d;  // any bit pattern: NaN and infinities write null
    }
    case 5:
    case 6: return random_string(rng);
    case 7: {
      json a = json::array();
      for (int n = int(rng() % 5); n > 0; --n) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int n = int(rng() % 5); n > 0; --n) o[random_string(rng)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

}  // namespace

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
