// Tool-call turns on the real tiny model (stories260K) for the engine tests: load an
// engine with a given chat family, run one turn to the end by stepping, and the weather
// tool every such test calls. Include after doctest.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "engine_impl.h"
#include "grammar/constraint.h"
#include "test_env.h"

namespace agentq::test {

inline std::unique_ptr<engine_impl> load(const std::string& family, std::string model = test::tiny_model().string()) {
  engine_config c;
  c.model_path = std::move(model);
  c.n_threads = 1;  // NOTE: tiny model: one thread is as fast and steadier on a busy host
  c.kv_budget_bytes = 32ull << 20;
  c.chat_family = family;
  std::string err;
  auto e = engine::load(c, &err);
  if (!e) FAIL("load: " << err);
  return std::unique_ptr<engine_impl>(static_cast<engine_impl*>(e.release()));
}

inline turn_result run(engine_impl& e, const turn_request& t, std::string* streamed = nullptr) {
  bool done = false;
  turn_result res;
  e.submit(t, {[&](std::string_view p) {
                 if (streamed) *streamed += p;
               },
               [&](turn_result r) {
                 res = std::move(r);
                 done = true;
               }});
  for (int guard = 0; guard < 100000 && !done; ++guard) e.step();
  REQUIRE(done);
  if (!res.error.empty()) MESSAGE("output: " << t.assistant_prefix << e.detokenize(res.output_ids));
  return res;
}

inline turn_request weather_turn(tool_choice_mode mode) {
  turn_request t;
  t.job_key = 21;
  t.messages = {{role::user, "What is the weather in Paris?", {}, "", ""}};
  t.tools = {
      {"get_weather", "Current weather for a city",
       R"({"type":"object","properties":{"city":{"enum":["Paris","London"]},"days":{"type":"integer","minimum":1,"maximum":3}},"required":["city","days"],"additionalProperties":false})"}};
  t.choice.mode = mode;
  t.parallel_tool_calls = false;
  t.max_tokens = 1000;  // NOTE: the tiny model pads every gap with whitespace (16 bytes at most)
  return t;
}

inline void check_one_call(const turn_result& r) {
  INFO("finish ", to_string(r.finish), ", error '", r.error, "', content '", r.message.content, "'");
  CHECK(r.finish == finish_reason::tool_calls);
  CHECK(r.error.empty());
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].name == "get_weather");
  CHECK(grammar::validate_json(weather_turn(tool_choice_mode::automatic).tools[0].parameters_json,
                               r.message.tool_calls[0].arguments_json)
            .empty());
}

}  // namespace agentq::test
