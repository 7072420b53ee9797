// Tool-call parsing: per-family syntax, render → parse round trips, the
// streaming detector (content streams, the call is held back), structured
// errors for every kind of bad call, tool_choice / parallel_tool_calls, ids.
#include <doctest/doctest.h>

#include <random>

#include "chat/chat.h"
#include "chat/tool_parser.h"
#include "grammar/constraint.h"
#include "grammar/vocab_pieces.h"
#include "json/json.h"
#include "test_env.h"

using namespace agentq;
using namespace agentq::chat;

static std::vector<tool_def> tools() {
  return {{"get_weather", "Weather for a city.",
           R"({"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"],"additionalProperties":false})"},
          {"search", "Search.", R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"]})"}};
}

static parse_result parse(template_family f, std::string_view text, tool_choice choice = {}, bool parallel = true) {
  tool_parser_options o;
  o.family = f;
  o.tools = tools();
  o.choice = choice;
  o.parallel_tool_calls = parallel;
  o.id_seed = 42;
  return parse_tool_calls(o, text);
}

static bool has_error(const parse_result& r, std::string_view s) {
  for (const auto& e : r.errors) if (e.find(s) != std::string::npos) return true;
  return false;
}

static const template_family all_families[] = {template_family::plain,   template_family::chatml, template_family::hermes,
                                               template_family::qwen3,   template_family::llama3, template_family::mistral,
                                               template_family::phi3,    template_family::smollm3};

TEST_CASE("per-family syntax, whitespace tolerant") {
  auto r = parse(template_family::chatml,
                 "Let me check.\n<tool_call>\n  {\"name\" : \"get_weather\",\n \"arguments\":{\"city\":\"Oslo\"} }  \n</tool_call>");
  CHECK(r.errors.empty());
  CHECK(r.message.content == "Let me check.");
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].name == "get_weather");
  CHECK(r.message.tool_calls[0].arguments_json == "{\"city\": \"Oslo\"}");
  CHECK(r.message.tool_calls[0].id == make_call_id(template_family::chatml, 42, 0));

  r = parse(template_family::llama3, " {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}} ");
  CHECK(r.errors.empty());
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.content.empty());
  r = parse(template_family::llama3, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}; "
                                     "{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"y\\\"}\"}");
  CHECK(r.errors.empty());
  REQUIRE(r.message.tool_calls.size() == 2);
  CHECK(r.message.tool_calls[1].arguments_json == "{\"q\": \"y\"}");
  r = parse(template_family::llama3, "The answer is {\"name\": 1}");   // content, not a call
  CHECK(r.errors.empty());
  CHECK(r.message.tool_calls.empty());
  r = parse(template_family::llama3, "{\"answer\": 42}");              // JSON without a name: content
  CHECK(r.message.tool_calls.empty());
  CHECK(r.message.content == "{\"answer\": 42}");

  r = parse(template_family::mistral,
            "[TOOL_CALLS] [{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}, \"id\": \"abc123XYZ\"},"
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"b\"}}]");
  CHECK(r.errors.empty());
  REQUIRE(r.message.tool_calls.size() == 2);
  CHECK(r.message.tool_calls[0].id == "abc123XYZ");
  CHECK(r.message.tool_calls[1].id.size() == 9);

  r = parse(template_family::mistral, " [{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}]");
  CHECK(r.errors.empty());
  CHECK(r.message.tool_calls.size() == 1);
  r = parse(template_family::mistral, "[1, 2] is a list");
  CHECK(r.message.tool_calls.empty());
  CHECK(r.message.content == "[1, 2] is a list");

  r = parse(template_family::qwen3, "<think>\nI could use <tool_call> here.\n</think>\n\n<tool_call>\n"
                                    "{\"name\": \"search\", \"arguments\": {\"q\": \"z\"}}\n</tool_call>");
  CHECK(r.errors.empty());
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].arguments_json == "{\"q\": \"z\"}");
}

TEST_CASE("structured errors, never a crash") {
  using tf = template_family;
  auto r = parse(tf::chatml, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": }</tool_call>");
  CHECK(has_error(r, "tool call 1: malformed JSON: JSON parse error at offset"));
  CHECK(r.message.tool_calls.empty());
  r = parse(tf::chatml, "<tool_call>{\"name\": \"delete_all\", \"arguments\": {}}</tool_call>");
  CHECK(has_error(r, "unknown tool 'delete_all' (available: get_weather, search)"));
  r = parse(tf::chatml, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\", \"days\": 9, \"x\": 1}}</tool_call>");
  CHECK(has_error(r, "('get_weather'): invalid arguments: /city: string shorter than minLength 1"));
  CHECK(has_error(r, "/days: number above maximum 7"));
  CHECK(has_error(r, "unexpected property \"x\""));
  CHECK(r.message.tool_calls.empty());
  r = parse(tf::chatml, "<tool_call>{\"arguments\": {}}</tool_call>");
  CHECK(has_error(r, "missing \"name\""));
  r = parse(tf::chatml, "<tool_call>{\"name\": \"search\", \"arguments\": [1]}</tool_call>");
  CHECK(has_error(r, "arguments must be a JSON object"));
  r = parse(tf::chatml, "<tool_call>[1,2]</tool_call>");
  CHECK(has_error(r, "expected a JSON object"));
  r = parse(tf::mistral, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}] trailing");
  CHECK(has_error(r, "unexpected text after the tool call array"));
  CHECK(r.message.tool_calls.size() == 1);
  r = parse(tf::llama3, "{\"name\": \"search\", \"parameters\": {\"q\": \"a\"}");
  CHECK(has_error(r, "unterminated"));
  // one good call and one bad: the good one is kept
  r = parse(tf::chatml, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}</tool_call>"
                        "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>");
  CHECK(r.message.tool_calls.size() == 1);
  CHECK(r.errors.size() == 1);
  // garbage of every kind
  std::mt19937_64 rng(3);
  const char* bits[] = {"<tool_call>", "</tool_call>", "{", "}", "[", "]", "\"", "name", ":", ",", "\\", "[TOOL_CALLS]",
                        "<|python_tag|>", "arguments", "search", " ", "\xff", ";"};
  for (int i = 0; i < 3000; i++) {
    std::string s;
    for (int k = 0, n = rng() % 12; k < n; k++) s += bits[rng() % std::size(bits)];
    for (auto f : all_families) (void)parse(f, s);
  }
}

TEST_CASE("tool_choice and parallel_tool_calls") {
  using tf = template_family;
  const char* two = "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}</tool_call>\n"
                    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"b\"}}</tool_call>";
  auto r = parse(tf::chatml, two, {}, false);
  CHECK(has_error(r, "parallel tool calls are disabled: got 2 calls"));
  CHECK(r.message.tool_calls.size() == 1);
  r = parse(tf::chatml, "Just text.", tool_choice{tool_choice_mode::required, ""});
  CHECK(has_error(r, "tool_choice requires a tool call"));
  r = parse(tf::chatml, two, tool_choice{tool_choice_mode::named, "search"});
  CHECK(has_error(r, "tool_choice requires 'search', got 'get_weather'"));
  CHECK(r.message.tool_calls.size() == 1);
  r = parse(tf::chatml, two, tool_choice{tool_choice_mode::none, ""});
  CHECK(r.errors.empty());
  CHECK(r.message.tool_calls.empty());
  CHECK(r.message.content == two);
}

TEST_CASE("call ids are deterministic") {
  CHECK(make_call_id(template_family::chatml, 7, 0) == make_call_id(template_family::chatml, 7, 0));
  CHECK(make_call_id(template_family::chatml, 7, 0) != make_call_id(template_family::chatml, 7, 1));
  CHECK(make_call_id(template_family::chatml, 7, 0) != make_call_id(template_family::chatml, 8, 0));
  std::string id = make_call_id(template_family::chatml, 7, 0);
  CHECK(id.size() == 21);
  CHECK(id.starts_with("call_"));
  CHECK(make_call_id(template_family::mistral, 7, 0).size() == 9);
}

// Render [user, assistant(calls)] and parse back the assistant's part.
TEST_CASE("round trip render -> parse for every family") {
  for (auto f : all_families) {
    chat_message user;
    user.role = role::user;
    user.content = "weather and news?";
    chat_message a;
    a.role = role::assistant;
    a.tool_calls.push_back({"call00001", "get_weather", R"({"city": "Oslo", "days": 2})"});
    bool parallel = f != template_family::llama3;   // Llama 3 renders one call per turn natively
    if (parallel) a.tool_calls.push_back({"call00002", "search", R"({"q": "news \"today\""})"});
    std::string prompt = render(f, {user}, tools(), true);
    std::string full = render(f, {user, a}, tools(), false);
    REQUIRE_MESSAGE(full.starts_with(prompt), to_string(f));
    std::string gen = full.substr(prompt.size());
    for (const auto& stop : traits(f).stop_strings) {
      size_t at = gen.find(stop);
      if (at != std::string::npos) gen.resize(at);
    }
    auto r = parse(f, gen);
    CHECK_MESSAGE(r.errors.empty(), to_string(f), ": ", r.errors.empty() ? "" : r.errors[0], " in ", gen);
    REQUIRE_MESSAGE(r.message.tool_calls.size() == a.tool_calls.size(), to_string(f), " ", gen);
    for (size_t i = 0; i < a.tool_calls.size(); i++) {
      CHECK(r.message.tool_calls[i].name == a.tool_calls[i].name);
      CHECK(*json::parse(r.message.tool_calls[i].arguments_json) == *json::parse(a.tool_calls[i].arguments_json));
    }
  }
}

TEST_CASE("streaming detector: content streams, the call is held back") {
  struct { template_family f; std::string content, call; } cases[] = {
      {template_family::chatml, "Sure, é checking <b>now</b>.\n",
       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n</tool_call>"},
      {template_family::mistral, "Looking [it] up. ", "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}]"},
      {template_family::llama3, "", "{\"name\": \"search\", \"parameters\": {\"q\": \"a\"}}"},
      {template_family::llama3, "Hi ", "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a\"}}"},
      {template_family::plain, "ok ", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}</tool_call>"},
  };
  std::mt19937_64 rng(5);
  for (const auto& c : cases) {
    for (int trial = 0; trial < 50; trial++) {
      auto p = make_tool_parser(c.f, tools(), {}, true, 1);
      std::string text = c.content + c.call, streamed;
      for (size_t i = 0; i < text.size();) {
        size_t n = 1 + rng() % 5;
        streamed += p->feed(std::string_view(text).substr(i, n));
        i += n;
      }
      CHECK_MESSAGE(streamed == c.content, to_string(c.f), ": ", streamed);
      CHECK(p->in_call());
      CHECK(p->call_start() == c.content.size());
      auto r = p->finish();
      CHECK(r.errors.empty());
      CHECK(r.message.tool_calls.size() == 1);
    }
  }
  // No call: everything streams (a partial marker at the end is released by finish()).
  auto p = make_tool_parser(template_family::chatml, tools(), {}, true, 1);
  std::string out = p->feed("a <tool");
  CHECK(out == "a ");
  out += p->feed("box> b");
  CHECK(out == "a <toolbox> b");
  CHECK_FALSE(p->in_call());
  // Qwen3: a marker inside the reasoning is not a call.
  p = make_tool_parser(template_family::qwen3, tools(), {}, true, 1);
  out = p->feed("<think>\nmaybe <tool_");
  out += p->feed("call> later\n</think>\n\nOk.<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}");
  CHECK(out == "<think>\nmaybe <tool_call> later\n</think>\n\nOk.");
  CHECK(p->in_call());
  CHECK(p->finish().message.tool_calls.size() == 1);
  // tool_choice none: markers are plain content.
  p = make_tool_parser(template_family::chatml, tools(), tool_choice{tool_choice_mode::none, ""}, true, 1);
  CHECK(p->feed("<tool_call>{}") == "<tool_call>{}");
}

TEST_CASE("a partial call opening held back at a truncation is dropped, never content") {
  struct {
    template_family f;
    const char* text;
    const char* streamed;
    const char* content;
  } cases[] = {
      {template_family::chatml, "Let me look. <tool_c", "Let me look. ", "Let me look."},
      {template_family::plain, "ok <", "ok ", "ok"},
      {template_family::mistral, "Looking [TOOL_CA", "Looking ", "Looking"},
      {template_family::llama3, "Hi <|python_", "Hi ", "Hi"},
      {template_family::chatml, "a <toolbox> b", "a <toolbox> b", "a <toolbox> b"},  // nothing held
  };
  for (const auto& c : cases) {
    INFO(to_string(c.f), ": ", std::string(c.text));
    auto p = make_tool_parser(c.f, tools(), {}, true, 1);
    CHECK(p->feed(c.text) == c.streamed);
    auto r = p->finish(true);
    CHECK(r.message.content == c.content);
    CHECK(r.message.tool_calls.empty());
    CHECK(r.errors.empty());
  }
  // A turn that ended by itself keeps what the model wrote.
  auto p = make_tool_parser(template_family::chatml, tools(), {}, true, 1);
  p->feed("Let me look. <tool_c");
  CHECK(p->finish(false).message.content == "Let me look. <tool_c");
}

// Constrained generation of whole tool-call turns: random walks under the
// tool-call constraint always parse back into valid calls, for every family.
TEST_CASE("constrained tool-call turns always parse cleanly") {
  for (const char* vocab_file : {"models/stories260K.gguf", "models/vocab/ggml-vocab-llama-spm.gguf"}) {
    grammar::gguf_vocab v;
    std::string err;
    REQUIRE_MESSAGE(grammar::load_gguf_vocab((test::shared_dir() / vocab_file).string(), &v, &err), err);
    auto vocab = grammar::make_vocab_index(v.pieces, v.eos_ids);
    bool big = v.pieces.size() > 1000;
    for (auto f : all_families) {
      for (int seed = 0; seed < (big ? 2 : 8); seed++) {
        tool_choice choice = seed % 2 ? tool_choice{tool_choice_mode::named, "get_weather"} : tool_choice{tool_choice_mode::required, ""};
        auto c = grammar::make_tool_call_constraint(f, tools(), choice, true, vocab, &err);
        REQUIRE_MESSAGE(c, err);
        std::mt19937_64 rng(seed);
        std::vector<uint32_t> mask;
        std::string text;
        bool done = false;
        for (int step = 0; step < 1500 && !done; step++) {
          c->fill_mask(mask);
          std::vector<token_id> allowed;
          bool eos = false;
          for (size_t t = 0; t < v.pieces.size(); t++) {
            if (!(mask[t / 32] >> (t % 32) & 1)) continue;
            if (t == static_cast<size_t>(v.eos_ids[0])) eos = true;
            else allowed.push_back(static_cast<token_id>(t));
          }
          REQUIRE((eos || !allowed.empty()));
          if (eos && (allowed.empty() || rng() % 2 == 0)) {
            done = true;
            break;
          }
          token_id t = allowed[rng() % allowed.size()];
          REQUIRE(c->accept(t));
          text += v.pieces[t];
        }
        if (!done) continue;
        auto r = parse(f, text, choice);
        CHECK_MESSAGE(r.errors.empty(), to_string(f), ": ", r.errors.empty() ? "" : r.errors[0], " in ", text);
        CHECK(!r.message.tool_calls.empty());
      }
    }
  }
}

// DeepSeek-R1 distills (#25): calls use the <tool_call> extension; the reply starts inside the
// reasoning the generation prompt opened. Render -> parse round trip, and the same calls whether
// the text is fed one character at a time or all at once.
TEST_CASE("deepseek-r1: calls round-trip and parse the same fed per character or at once") {
  for (auto f : {template_family::deepseek_r1, template_family::deepseek_r1_qwen}) {
    chat_message user;
    user.role = role::user;
    user.content = "weather and news?";
    chat_message a;
    a.role = role::assistant;
    a.tool_calls.push_back({"call00001", "get_weather", R"({"city": "Oslo", "days": 2})"});
    a.tool_calls.push_back({"call00002", "search", R"({"q": "news \"today\""})"});
    // The rendered assistant turn: "<｜Assistant｜>" + calls + "<｜end▁of▁sentence｜>".
    std::string full = render(f, {user, a}, tools(), false);
    const std::string head = render(f, {user}, tools(), false) + "<｜Assistant｜>";
    REQUIRE_MESSAGE(full.starts_with(head), to_string(f));
    std::string calls = full.substr(head.size());
    REQUIRE(calls.ends_with(traits(f).stop_strings[0]));
    calls.resize(calls.size() - traits(f).stop_strings[0].size());
    const std::string reply = "Need both.\n</think>\n\nChecking.\n" + calls;
    auto whole = parse(f, reply);
    CHECK_MESSAGE(whole.errors.empty(), to_string(f), ": ", whole.errors.empty() ? "" : whole.errors[0]);
    REQUIRE(whole.message.tool_calls.size() == 2);
    CHECK(whole.message.tool_calls[0].name == "get_weather");
    CHECK(whole.message.tool_calls[1].arguments_json == R"({"q": "news \"today\""})");
    CHECK(whole.message.content == "Need both.\n</think>\n\nChecking.");
    for (bool per_char : {true, false}) {
      auto p = make_tool_parser(f, tools(), {}, true, 42);
      std::string streamed;
      if (per_char)
        for (char ch : reply) streamed += p->feed(std::string_view(&ch, 1));
      else
        streamed = p->feed(reply);
      CHECK(streamed == "Need both.\n</think>\n\nChecking.\n");
      auto r = p->finish();
      CHECK(r.errors.empty());
      REQUIRE(r.message.tool_calls.size() == whole.message.tool_calls.size());
      for (size_t i = 0; i < r.message.tool_calls.size(); i++) {
        CHECK(r.message.tool_calls[i].name == whole.message.tool_calls[i].name);
        CHECK(r.message.tool_calls[i].arguments_json == whole.message.tool_calls[i].arguments_json);
        CHECK(r.message.tool_calls[i].id == whole.message.tool_calls[i].id);
      }
    }
  }
}

// GPT-OSS Harmony (#25): the reply is a run of messages after the "<|start|>assistant" prompt;
// analysis is reasoning (never content), a message to functions.NAME is a call, final is content.
TEST_CASE("harmony: channels, calls in either header form, streaming without the reasoning") {
  const auto f = template_family::harmony;
  // A call after reasoning, as the model writes it (recipient after the channel).
  const std::string call_reply =
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\", \"days\": 2}<|call|>";
  auto r = parse(f, call_reply);
  CHECK_MESSAGE(r.errors.empty(), (r.errors.empty() ? "" : r.errors[0]));
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].name == "get_weather");
  CHECK(r.message.tool_calls[0].arguments_json == R"({"city": "Oslo", "days": 2})");
  CHECK(r.message.content.empty());
  // As the template prints calls (recipient after the role), and without the closing <|call|> (a stop string).
  r = parse(f, "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.search<|channel|>commentary "
               "json<|message|>{\"q\": \"news\"}");
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].name == "search");
  // A final answer: content is the final channel only.
  r = parse(f, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>It is 18 C.");
  CHECK(r.errors.empty());
  CHECK(r.message.tool_calls.empty());
  CHECK(r.message.content == "It is 18 C.");
  // Without tools the reasoning is still not content.
  tool_parser_options none;
  none.family = f;
  CHECK(parse_tool_calls(none, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b")
            .message.content == "b");
  // Text that is not Harmony at all stays content.
  CHECK(parse(f, "plain words").message.content == "plain words");
  // Bad calls are errors, never crashes.
  CHECK(has_error(parse(f, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":"),
                  "malformed JSON"));
  CHECK(has_error(parse(f, "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}"), "unknown tool"));
  CHECK(has_error(parse(f, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"days\": 2}"),
                  "invalid arguments"));
  // Render -> parse: a rendered call message parses back to the call.
  chat_message user{role::user, "weather?", {}, "", ""};
  chat_message a;
  a.role = role::assistant;
  a.tool_calls.push_back({"call00001", "get_weather", R"({"city": "Oslo", "days": 2})"});
  const std::string prompt = render(f, {user}, tools(), true), full = render(f, {user, a}, tools(), false);
  REQUIRE(full.starts_with(prompt));
  r = parse(f, full.substr(prompt.size()));
  CHECK(r.errors.empty());
  REQUIRE(r.message.tool_calls.size() == 1);
  CHECK(r.message.tool_calls[0].arguments_json == R"({"city": "Oslo", "days": 2})");
  // Streaming: only the final body streams, per character or at once; a call's header stops it.
  const std::string final_reply =
      "<|channel|>analysis<|message|>Hmm <b> 2<3.<|end|><|start|>assistant<|channel|>final<|message|>Sunny <b>.";
  for (bool per_char : {true, false}) {
    auto p = make_tool_parser(f, tools(), {}, true, 42);
    std::string streamed;
    if (per_char)
      for (char ch : final_reply) streamed += p->feed(std::string_view(&ch, 1));
    else
      streamed = p->feed(final_reply);
    CHECK(streamed == "Sunny <b>.");
    CHECK(p->finish().message.content == "Sunny <b>.");
    auto q = make_tool_parser(f, tools(), {}, true, 42);
    std::string s2;
    if (per_char)
      for (char ch : call_reply) s2 += q->feed(std::string_view(&ch, 1));
    else
      s2 = q->feed(call_reply);
    CHECK(s2.empty());
    CHECK(q->in_call());
    CHECK(q->finish().message.tool_calls.size() == 1);
  }
}

TEST_CASE("harmony: constrained calls always parse cleanly") {
  grammar::gguf_vocab v;
  std::string err;
  REQUIRE_MESSAGE(grammar::load_gguf_vocab((test::shared_dir() / "models/stories260K.gguf").string(), &v, &err), err);
  auto vocab = grammar::make_vocab_index(v.pieces, v.eos_ids);
  for (int seed = 0; seed < 8; seed++) {
    tool_choice choice = seed % 2 ? tool_choice{tool_choice_mode::named, "get_weather"} : tool_choice{tool_choice_mode::required, ""};
    auto c = grammar::make_tool_call_constraint(template_family::harmony, tools(), choice, true, vocab, &err);
    REQUIRE_MESSAGE(c, err);
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> mask;
    std::string text;
    bool done = false;
    for (int step = 0; step < 1500 && !done; step++) {
      c->fill_mask(mask);
      std::vector<token_id> allowed;
      bool eos = false;
      for (size_t t = 0; t < v.pieces.size(); t++) {
        if (!(mask[t / 32] >> (t % 32) & 1)) continue;
        if (t == static_cast<size_t>(v.eos_ids[0])) eos = true;
        else allowed.push_back(static_cast<token_id>(t));
      }
      REQUIRE((eos || !allowed.empty()));
      if (eos && (allowed.empty() || rng() % 2 == 0)) {
        done = true;
        break;
      }
      token_id t = allowed[rng() % allowed.size()];
      REQUIRE(c->accept(t));
      text += v.pieces[t];
    }
    if (!done) continue;
    CHECK(text.starts_with("<|channel|>commentary to=functions."));
    auto r = parse(template_family::harmony, text, choice);
    CHECK_MESSAGE(r.errors.empty(), (r.errors.empty() ? "" : r.errors[0]), " in ", text);
    CHECK(r.message.tool_calls.size() == 1);
  }
}

// What streams of a Harmony reply always begins its final content, however the text is cut
// (the fuzz target's property, over random mixes of Harmony pieces).
TEST_CASE("harmony: streamed content begins the final content for random replies and chunkings") {
  const char* pieces[] = {"<|channel|>", "analysis", "final", "commentary", " to=functions.search", " to=functions.nope",
                          " <|constrain|>json", "<|message|>", "<|end|>", "<|start|>assistant", "<|call|>", "<|return|>",
                          "{\"q\": \"a\"}", "Hello", " ", "\n", "<", "<|", "x<y", "é"};
  std::mt19937_64 rng(7);
  for (int it = 0; it < 3000; ++it) {
    std::string text;
    const int n = 1 + int(rng() % 12);
    for (int i = 0; i < n; ++i) text += pieces[rng() % std::size(pieces)];
    for (int mode = 0; mode < 2; ++mode) {
      auto p = make_tool_parser(template_family::harmony, tools(), mode ? tool_choice{tool_choice_mode::none, ""} : tool_choice{},
                                true, 1);
      std::string streamed;
      for (size_t i = 0; i < text.size();) {
        const size_t k = 1 + rng() % 9;
        streamed += p->feed(std::string_view(text).substr(i, k));
        i += k;
      }
      const std::string content = p->finish().message.content;
      size_t a = 0, b = streamed.size();
      while (a < b && std::isspace(static_cast<unsigned char>(streamed[a]))) a++;
      while (b > a && std::isspace(static_cast<unsigned char>(streamed[b - 1]))) b--;
      CHECK_MESSAGE(content.starts_with(streamed.substr(a, b - a)), "text: ", text, "\nstreamed: ", streamed,
                    "\ncontent: ", content);
    }
  }
}
