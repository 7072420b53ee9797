// Tool-call turns on the real tiny model, sampled (temperature > 0) across seeds: under
// tool_choice required every call parses and validates against its schema; under auto
// with a response_format every turn is a valid call or an answer matching the schema.
// Also: stop strings never cut a call. (Split from engine_tools.cpp to keep each test short.)
#include <doctest/doctest.h>

#include "tiny_turns.h"

using namespace agentq;
using namespace agentq::test;

TEST_CASE("auto + response_format: every turn is a valid call or an answer matching the schema") {
  auto e = load("chatml");
  int n_calls = 0, n_answers = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    auto t = weather_turn(tool_choice_mode::automatic);
    t.job_key = 100 + seed;
    t.response_schema_json =
        R"({"type":"object","properties":{"temp":{"type":"integer","minimum":-50,"maximum":50}},"required":["temp"],"additionalProperties":false})";
    t.sampling.temperature = 1.0f;
    t.sampling.seed = seed;
    if (seed % 3 == 2) t.assistant_prefix = "<tool";  // leans towards a call
    auto r = run(*e, t);
    INFO("seed ", seed, ": ", to_string(r.finish), " '", r.message.content, "' ", r.error);
    REQUIRE(r.finish != finish_reason::error);
    if (r.finish == finish_reason::length) continue;
    if (!r.message.tool_calls.empty()) {
      check_one_call(r);
      ++n_calls;
    } else {
      CHECK(grammar::validate_json(t.response_schema_json, r.message.content).empty());
      ++n_answers;
    }
  }
  MESSAGE(n_calls << " calls, " << n_answers << " answers");
  CHECK(n_calls + n_answers >= 3);
  CHECK(n_calls >= 1);
}

TEST_CASE("property: tool_choice required on the tiny model — calls parse and validate across seeds and schemas") {
  const char* schemas[] = {
      R"({"type":"object","properties":{"on":{"type":"boolean"},"tag":{"type":"string","maxLength":6}},"required":["on","tag"],"additionalProperties":false})",
      R"({"type":"object","properties":{"units":{"type":"array","items":{"enum":["c","f"]},"minItems":1,"maxItems":2},"at":{"type":"object","properties":{"h":{"type":"integer","minimum":0,"maximum":23}},"required":["h"]}},"required":["units","at"]})",
      R"({"type":"object","properties":{"x":{"anyOf":[{"type":"null"},{"type":"number","minimum":-1,"maximum":1}]}},"required":["x"]})",
  };
  auto e = load("chatml");
  int n_ok = 0;
  for (int k = 0; k < 3; ++k) {
    for (uint64_t seed = 0; seed < 2; ++seed) {
      auto t = weather_turn(tool_choice_mode::required);
      t.job_key = 200 + uint64_t(k) * 10 + seed;
      t.tools = {{"f", "", schemas[k]}};
      t.sampling.temperature = 0.8f;
      t.sampling.seed = seed;
      auto r = run(*e, t);
      INFO("schema ", k, " seed ", seed, ": ", to_string(r.finish), " ", r.error);
      if (r.finish == finish_reason::length) continue;  // cut off: nothing to validate
      CHECK(r.finish == finish_reason::tool_calls);
      CHECK(r.error.empty());
      REQUIRE(r.message.tool_calls.size() == 1);
      CHECK(grammar::validate_json(schemas[k], r.message.tool_calls[0].arguments_json).empty());
      ++n_ok;
    }
  }
  CHECK(n_ok >= 5);
}

TEST_CASE("stop strings do not cut a tool call, forced or opened under auto") {
  auto e = load("chatml");
  for (auto mode : {tool_choice_mode::required, tool_choice_mode::automatic}) {
    auto t = weather_turn(mode);
    t.stop = {",", "\""};  // both occur inside every call of this tool
    if (mode == tool_choice_mode::automatic) t.assistant_prefix = "<tool_call>\n";
    check_one_call(run(*e, t));
  }
}
