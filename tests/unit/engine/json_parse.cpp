// Engine JSON: strict RFC 8259 parsing (accept/refuse tables, escapes,
// surrogates, limits, error offsets) and the compact / Python-style serializers.
#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>

#include "json/json.h"

using namespace agentq;

static json::value must(std::string_view s) {
  std::string err;
  auto v = json::parse(s, &err);
  REQUIRE_MESSAGE(v.has_value(), err, " for ", std::string(s));
  return *v;
}

TEST_CASE("accepts valid documents") {
  const char* ok[] = {
      "null", "true", "false", "0", "-0", "1", "-1.5", "1e10", "1E-2", "2.5e+3", "\"\"", "\"a\"", "[]", "{}",
      " [1, 2 ,3] ", "{\"a\":{\"b\":[null,true,{}]}}", "\"\\u00e9\\n\\t\\\\\\\"\\/\"", "\"\\ud83d\\ude00\"",
      "\"é😀\"", "\n\t\r 42 \n",
  };
  for (const char* s : ok) {
    std::string err;
    CHECK_MESSAGE(json::parse(s, &err).has_value(), s, " ", err);
  }
}

TEST_CASE("refuses invalid documents with an offset") {
  const char* bad[] = {
      "", " ", "nul", "tru", "[1,]", "{\"a\":1,}", "{a:1}", "01", "-", "1.", ".5", "1e", "+1", "[1 2]",
      "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"a\nb\"",
      "{\"a\" 1}", "[", "]", "{} {}", "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "NaN", "Infinity",
      "{\"a\":1,\"a\":2}", "1e999",
  };
  for (const char* s : bad) {
    std::string err;
    CHECK_MESSAGE(!json::parse(s, &err).has_value(), "accepted: ", s);
    CHECK(err.find("offset") != std::string::npos);
  }
  std::string err;
  CHECK_FALSE(json::parse("[1, 2, x]", &err));
  CHECK(err.find("offset 7") != std::string::npos);
}

TEST_CASE("decodes escapes and surrogate pairs") {
  CHECK(must("\"\\ud83d\\ude00\"").as_string() == "\xF0\x9F\x98\x80");
  CHECK(must("\"\\u00e9\"").as_string() == "\xC3\xA9");
  CHECK(must("\"\\u0000\"").as_string() == std::string(1, '\0'));
  CHECK(must("\"a\\/b\"").as_string() == "a/b");
}

TEST_CASE("depth and size limits") {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  std::string err;
  CHECK_FALSE(json::parse(deep, &err));
  CHECK(err.find("nesting") != std::string::npos);
  json::parse_options opt;
  opt.max_depth = 300;
  CHECK(json::parse(deep, &err, opt));
  opt.max_size = 4;
  CHECK_FALSE(json::parse("[1,2,3]", &err, opt));
}

TEST_CASE("objects keep insertion order; numbers keep their text") {
  auto v = must("{\"z\": 1.50, \"a\": [1e2, -0], \"m\": \"x\\ny\"}");
  REQUIRE(v.members().size() == 3);
  CHECK(v.members()[0].first == "z");
  CHECK(v.dump() == "{\"z\":1.50,\"a\":[1e2,-0],\"m\":\"x\\ny\"}");
  CHECK(v.find("a")->items()[0].as_number() == 100.0);
  CHECK(v.find("a")->items()[0].is_integer());
}

TEST_CASE("python-style dumps match json.dumps") {
  auto v = must("{\"a\":[1,{\"b\":null}],\"c\":{},\"d\":[],\"e\":\"é\\u0001\"}");
  CHECK(v.dump_py() == "{\"a\": [1, {\"b\": null}], \"c\": {}, \"d\": [], \"e\": \"é\\u0001\"}");
  CHECK(v.dump_py(4) ==
        "{\n    \"a\": [\n        1,\n        {\n            \"b\": null\n        }\n    ],\n    \"c\": {},\n"
        "    \"d\": [],\n    \"e\": \"é\\u0001\"\n}");
}

TEST_CASE("dump then parse round-trips random documents") {
  std::mt19937_64 rng(7);
  auto rnd_string = [&] {
    std::string s;
    int n = rng() % 6;
    for (int i = 0; i < n; i++) {
      int k = rng() % 6;
      if (k == 0) s += "\"";
      else if (k == 1) s += "\\";
      else if (k == 2) s.push_back(static_cast<char>(rng() % 32));
      else if (k == 3) s += "\xE2\x82\xAC";
      else s.push_back(static_cast<char>('a' + rng() % 26));
    }
    return s;
  };
  std::function<json::value(int)> gen = [&](int depth) -> json::value {
    int k = rng() % (depth > 3 ? 4 : 6);
    switch (k) {
      case 0: return json::value();
      case 1: return json::value::make_bool(rng() & 1);
      case 2: return json::value::make_number(static_cast<double>(static_cast<int64_t>(rng() % 2000000) - 1000000) / 8);
      case 3: return json::value::make_string(rnd_string());
      case 4: {
        auto a = json::value::make_array();
        for (int i = 0, n = rng() % 4; i < n; i++) a.push_back(gen(depth + 1));
        return a;
      }
      default: {
        auto o = json::value::make_object();
        for (int i = 0, n = rng() % 4; i < n; i++) o.push_back("k" + std::to_string(i) + rnd_string(), gen(depth + 1));
        return o;
      }
    }
  };
  for (int i = 0; i < 500; i++) {
    json::value v = gen(0);
    std::string text = v.dump();
    auto back = must(text);
    CHECK(back == v);
    CHECK(back.dump() == text);
    CHECK(must(v.dump_py(2)) == v);
  }
}
