// Tool-call turns under tool_choice auto on the real tiny model (stories260K): the
// grammar stays off while the model writes text (token for token what it writes with
// tool_choice none), switches on when a call opens (prefilled here: the tiny base model
// never opens one itself), holds a response schema for non-tool answers, and sees a
// [TOOL_CALLS] control token the model samples itself.
#include <doctest/doctest.h>

#include "engine_impl.h"
#include "grammar/constraint.h"
#include "temp_dir.h"
#include "test_env.h"
#include "vocab_edit.h"

using namespace agentq;

namespace {

std::unique_ptr<engine_impl> load(const std::string& family, std::string model = test::tiny_model().string()) {
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

turn_result run(engine_impl& e, const turn_request& t, std::string* streamed = nullptr) {
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

turn_request weather_turn(tool_choice_mode mode) {
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

void check_one_call(const turn_result& r) {
  INFO("finish ", to_string(r.finish), ", error '", r.error, "', content '", r.message.content, "'");
  CHECK(r.finish == finish_reason::tool_calls);
  CHECK(r.error.empty());
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].name == "get_weather");
  CHECK(grammar::validate_json(weather_turn(tool_choice_mode::automatic).tools[0].parameters_json,
                               r.message.tool_calls[0].arguments_json)
            .empty());
}

}  // namespace

TEST_CASE("auto without a call: unconstrained, token for token the output of tool_choice none") {
  auto e = load("");
  auto a = weather_turn(tool_choice_mode::automatic);
  a.max_tokens = 48;
  auto n = a;
  n.choice.mode = tool_choice_mode::none;
  std::string streamed;
  auto ra = run(*e, a, &streamed);
  e->release(a.job_key);
  auto rn = run(*e, n);
  CHECK(ra.output_ids == rn.output_ids);
  CHECK(ra.message.tool_calls.empty());
  CHECK(rn.message.content.find(ra.message.content) != std::string::npos);  // auto's content is trimmed
  CHECK(streamed.find(ra.message.content.substr(0, 10)) != std::string::npos);
}

TEST_CASE("auto: a call opened by the prefill is constrained to a valid call, per family") {
  struct {
    const char* family;
    const char* prefix;
  } cases[] = {{"plain", "<tool_call>"},    {"chatml", "<tool_call>\n"},
               {"mistral", "[TOOL_CALLS]"}, {"llama3", "<|python_tag|>"},
               {"llama3", "{\"name\": \""}, {"chatml", "Checking. <tool_call>\n{\"name\""}};
  for (const auto& c : cases) {
    INFO(std::string(c.family), " prefix ", std::string(c.prefix));
    auto e = load(c.family);
    auto t = weather_turn(tool_choice_mode::automatic);
    t.assistant_prefix = c.prefix;
    auto r = run(*e, t);
    check_one_call(r);
    CHECK(r.message.content == (std::string(c.prefix).starts_with("Checking") ? "Checking." : ""));
  }
  // A prefix that does not fit a forced call is refused up front.
  auto e = load("chatml");
  auto t = weather_turn(tool_choice_mode::required);
  t.assistant_prefix = "Sure";
  auto r = run(*e, t);
  CHECK(r.finish == finish_reason::error);
  CHECK(r.error.find("assistant_prefix") != std::string::npos);
}

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

TEST_CASE("a [TOOL_CALLS] control token the model samples opens the call; it never reaches content") {
  // Make the tiny model's first greedy token of this turn the Mistral [TOOL_CALLS] control token.
  auto t = weather_turn(tool_choice_mode::automatic);
  t.max_tokens = 1;
  token_id first;
  {
    auto e = load("mistral");
    auto r = run(*e, t);
    REQUIRE(r.output_ids.size() == 1);
    first = r.output_ids[0];
    auto prompt = e->tokenize(e->render(t.messages, t.tools), false, true);
    REQUIRE_MESSAGE(std::find(prompt.begin(), prompt.end(), first) == prompt.end(), "the prompt uses token ", first);
  }
  test::temp_dir dir;
  std::string err;
  REQUIRE_MESSAGE(
      test::copy_gguf_with_tokens(test::tiny_model().string(), dir.file("m.gguf"), {{first, "[TOOL_CALLS]", 3}}, &err),
      err);
  auto e = load("mistral", dir.file("m.gguf"));
  t.max_tokens = 1000;
  std::string streamed;
  auto r = run(*e, t, &streamed);
  REQUIRE(!r.output_ids.empty());
  CHECK(r.output_ids[0] == first);
  check_one_call(r);
  CHECK(r.message.content.empty());
  CHECK(streamed.find("TOOL_CALLS") == std::string::npos);
}

TEST_CASE("round trip for every family: render -> tokenize -> generate -> parse gives the same call") {
  // The assistant's rendered call (what the template prints for it) is the prefill; the
  // engine generates from there (the constraint allows only the end of the turn) and parses.
  auto t = weather_turn(tool_choice_mode::automatic);
  chat_message call_msg{role::assistant, "", {{"call_1", "get_weather", R"({"city": "London", "days": 2})"}}, "", ""};
  for (const char* family : {"plain", "chatml", "hermes", "qwen3", "llama3", "mistral", "phi3", "smollm3"}) {
    INFO(std::string(family));
    auto e = load(family);
    const auto f = e->family();
    const std::string base = chat::render(f, t.messages, t.tools, true);
    auto msgs = t.messages;
    msgs.push_back(call_msg);
    const std::string full = chat::render(f, msgs, t.tools, false);
    REQUIRE(full.starts_with(base));
    std::string said = full.substr(base.size());
    for (const auto& s : chat::traits(f).stop_strings) said = said.substr(0, said.find(s));
    t.assistant_prefix = said;
    auto r = run(*e, t);
    check_one_call(r);
    REQUIRE(r.message.tool_calls.size() == 1);
    CHECK(r.message.tool_calls[0].arguments_json == call_msg.tool_calls[0].arguments_json);
    CHECK(r.output_ids.size() <= 1);  // nothing but the end of the turn was left to generate
  }
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
