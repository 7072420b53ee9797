// Tool-call turns under tool_choice auto on the real tiny model (stories260K): the
// grammar stays off while the model writes text (token for token what it writes with
// tool_choice none), switches on when a call opens (prefilled here: the tiny base model
// never opens one itself), sees a [TOOL_CALLS] control token the model samples itself,
// and render -> tokenize -> generate -> parse round-trips a call for every family.
// Sampled (seeded) turns are in engine_tools_sampled.cpp. A turn cut inside a call opening
// drops the partial marker.
#include <doctest/doctest.h>

#include "temp_dir.h"
#include "tiny_turns.h"
#include "vocab_edit.h"

using namespace agentq;
using namespace agentq::test;

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

TEST_CASE("a turn truncated inside a call opening returns the text before it, not the partial marker") {
  // The prefill ends inside "<tool_call>"; the tiny model's greedy next token ("c") keeps
  // it a possible opening, and the token limit cuts the turn there.
  auto e = load("chatml");
  auto t = weather_turn(tool_choice_mode::automatic);
  t.assistant_prefix = "Checking. <tool_";
  t.max_tokens = 1;
  std::string streamed;
  auto r = run(*e, t, &streamed);
  REQUIRE_MESSAGE(t.assistant_prefix + e->detokenize(r.output_ids) == "Checking. <tool_c",
                  "the model's next token changed: ", e->detokenize(r.output_ids));
  CHECK(r.finish == finish_reason::length);
  CHECK(r.message.content == "Checking.");
  CHECK(r.message.tool_calls.empty());
  CHECK(streamed.find('<') == std::string::npos);
}
