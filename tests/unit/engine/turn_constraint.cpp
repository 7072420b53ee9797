// Lazy constraints of a tool_choice auto turn (grammar/turn_constraint.h), driven by a
// scripted logit source over real vocabularies: free text stays unconstrained, a call
// opening switches the tool-call grammar on (so a call the script gets wrong still comes
// out valid), a response schema holds for a non-tool answer, and the control-token
// openings of Mistral and Llama 3 ([TOOL_CALLS], <|python_tag|>) are seen.
#include "grammar/turn_constraint.h"

#include <doctest/doctest.h>

#include "chat/tool_parser.h"
#include "engine_impl.h"
#include "sample/sampler.h"
#include "temp_dir.h"
#include "test_env.h"
#include "vocab_edit.h"

using namespace agentq;
using chat::template_family;
using grammar::turn_phase;

namespace {

std::vector<tool_def> tools() {
  return {
      {"get_weather", "Weather for a city.",
       R"({"type":"object","properties":{"city":{"type":"string","minLength":1},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false})"},
      {"search", "Search.",
       R"({"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"]})"}};
}
const char* answer_schema = R"({"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]})";

// The llama-spm 32k vocabulary with two rare tokens turned into the control tokens that
// open Mistral and Llama 3 tool calls (the shared vocab files have neither).
struct vocab_fixture {
  test::temp_dir dir;
  std::unique_ptr<tokenizer> tok;
  std::shared_ptr<const grammar::vocab_index> index;
  static constexpr token_id tool_calls_id = 31990, python_tag_id = 31991;
  vocab_fixture() {
    std::string err;
    const std::string path = dir.file("vocab.gguf");
    REQUIRE_MESSAGE(
        test::copy_gguf_with_tokens((test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string(), path,
                                    {{tool_calls_id, "[TOOL_CALLS]", 3}, {python_tag_id, "<|python_tag|>", 3}}, &err),
        err);
    auto f = gguf::file::open(path, &err);
    REQUIRE_MESSAGE(f, err);
    tok = tokenizer::load(*f, &err);
    REQUIRE_MESSAGE(tok, err);
    index = grammar::make_vocab_index(tok->pieces(), tok->eog_ids());
  }
};
vocab_fixture& vocab() {
  static vocab_fixture v;
  return v;
}

// A scripted model: its logits favour the longest piece that continues `want`. Once the
// mask pushes it off script it prefers EOS and JSON closers, so constrained values end.
struct script_result {
  std::string text;                // markers spelled out
  std::vector<turn_phase> phases;  // distinct phases in order
  bool eos = false, finished = false;
};
script_result run_script(grammar::turn_constraint& c, const tokenizer& tok, std::string want, int max_steps = 400) {
  const int32_t n = tok.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  for (token_id t = 0; t < n; ++t)
    pieces[size_t(t)] = tok.is_control(t) ? tok.token_to_piece(t, true) : tok.pieces()[size_t(t)];
  auto piece = [&](token_id t) -> const std::string& { return pieces[size_t(t)]; };
  sampler greedy(sampling_params{});
  script_result r;
  size_t pos = 0;
  bool on_script = true;
  std::vector<float> logits(static_cast<size_t>(n));
  std::vector<uint32_t> mask;
  for (int step = 0; step < max_steps; ++step) {
    if (r.phases.empty() || r.phases.back() != c.phase()) r.phases.push_back(c.phase());
    for (token_id t = 0; t < n; ++t) {
      const std::string& p = piece(t);
      float l = -float(p.size()) - float(t) * 1e-6f;
      if (p.find_first_not_of(" \t\r\n") == std::string::npos) l -= 100;  // off script, no padding
      if (tok.is_eog(t))
        l = pos >= want.size() || !on_script ? 500.0f : -1000.0f;
      else if (p.empty() ||
               (tok.is_control(t) && t != vocab_fixture::tool_calls_id && t != vocab_fixture::python_tag_id))
        l = -1000.0f;
      else if (on_script && want.compare(pos, p.size(), p) == 0)
        l = 1000.0f + float(p.size());
      else if (p == "\"")
        l = 400;
      else if (p == "}")
        l = 390;
      else if (p == "]")
        l = 380;
      logits[size_t(t)] = l;
    }
    const bool constrained = c.fill_mask(mask);
    const token_id t = constrained ? greedy.sample(logits.data(), n, mask) : greedy.sample(logits.data(), n);
    REQUIRE(t >= 0);
    if (tok.is_eog(t)) {
      r.eos = true;
      break;
    }
    const std::string& p = piece(t);
    if (on_script && want.compare(pos, p.size(), p) == 0)
      pos += p.size();
    else
      on_script = false;
    c.accept(t);
    r.text += p;
    if (c.is_finished()) {
      r.finished = true;
      break;
    }
  }
  if (r.phases.back() != c.phase()) r.phases.push_back(c.phase());
  CHECK(c.text().ends_with(r.text));
  return r;
}

std::unique_ptr<grammar::turn_constraint> make(template_family f, bool parallel, std::string schema = {}) {
  grammar::turn_constraint_options o;
  o.family = f;
  o.tools = tools();
  o.parallel_tool_calls = parallel;
  o.response_schema_json = std::move(schema);
  o.markers = find_call_markers(*vocab().tok, f);
  std::string err;
  auto c = grammar::turn_constraint::make(std::move(o), vocab().index, &err);
  REQUIRE_MESSAGE(c, err);
  return c;
}

chat::parse_result parse(template_family f, const std::string& text, bool parallel = true) {
  chat::tool_parser_options o;
  o.family = f;
  o.tools = tools();
  o.parallel_tool_calls = parallel;
  return chat::parse_tool_calls(o, text);
}

bool has(const std::vector<turn_phase>& v, turn_phase p) {
  return std::find(v.begin(), v.end(), p) != v.end();
}

}  // namespace

TEST_CASE("control-token openings: found in a real vocabulary, spelled out for detection only") {
  auto& v = vocab();
  CHECK(v.tok->pieces()[vocab_fixture::tool_calls_id].empty());  // what the detector used to see
  CHECK(v.tok->encode("[TOOL_CALLS]", false, true) == std::vector<token_id>{vocab_fixture::tool_calls_id});
  auto m = find_call_markers(*v.tok, template_family::mistral);
  REQUIRE(m.size() == 1);
  CHECK(m[0] == std::pair<token_id, std::string>{vocab_fixture::tool_calls_id, "[TOOL_CALLS]"});
  m = find_call_markers(*v.tok, template_family::llama3);
  REQUIRE(m.size() == 1);
  CHECK(m[0].first == vocab_fixture::python_tag_id);
  // "<tool_call>" is no single token here: nothing to spell out (text detection suffices).
  CHECK(find_call_markers(*v.tok, template_family::chatml).empty());
}

TEST_CASE("auto: free text is unconstrained; a wrong call after the opening comes out valid") {
  auto& v = vocab();
  // The script calls get_weather with a number for the city and no days: the grammar fixes both.
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 12}}\n</tool_call>";
  for (template_family f :
       {template_family::chatml, template_family::qwen3, template_family::hermes, template_family::plain}) {
    auto c = make(f, false);
    std::vector<uint32_t> mask;
    CHECK_FALSE(c->fill_mask(mask));
    auto r = run_script(*c, *v.tok, "Let me look that up.\n" + call);
    INFO(to_string(f), ": ", r.text);
    CHECK(r.phases == std::vector<turn_phase>{turn_phase::free, turn_phase::call, turn_phase::done});
    CHECK(r.finished);  // parallel calls off: the turn ends when the call closes
    auto p = parse(f, r.text, false);
    CHECK(p.errors.empty());
    CHECK(p.message.content == "Let me look that up.");
    REQUIRE(p.message.tool_calls.size() == 1);
    CHECK(p.message.tool_calls[0].name == "get_weather");
  }
  // No opening: never constrained, ends on EOS.
  auto c = make(template_family::chatml, true);
  auto r = run_script(*c, *v.tok, "Just text, <tool> and {\"name\": 1}.");
  CHECK(r.phases == std::vector<turn_phase>{turn_phase::free});
  CHECK(r.eos);
  CHECK(r.text == "Just text, <tool> and {\"name\": 1}.");
}

TEST_CASE("auto, parallel calls: back to free text after each call; unknown names are impossible") {
  auto& v = vocab();
  auto c = make(template_family::chatml, true);
  const std::string want =
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"delete_all\", \"arguments\": {}}\n</tool_call>";
  auto r = run_script(*c, *v.tok, want);
  INFO(r.text);
  CHECK(r.phases == std::vector<turn_phase>{turn_phase::free, turn_phase::call, turn_phase::free, turn_phase::call,
                                            turn_phase::free});
  auto p = parse(template_family::chatml, r.text);
  CHECK(p.errors.empty());
  REQUIRE(p.message.tool_calls.size() == 2);
  CHECK(p.message.tool_calls[1].name != "delete_all");
}

TEST_CASE("auto: Mistral [TOOL_CALLS] and Llama <|python_tag|> control tokens open constrained calls") {
  auto& v = vocab();
  struct {
    template_family f;
    std::string want;
  } cases[] = {
      {template_family::mistral, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": 42}}]"},
      {template_family::llama3,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 9}}"},
      {template_family::llama3, "{\"name\": \"search\", \"parameters\": {\"q\": \"far too long a query\"}}"},
  };
  for (const auto& k : cases) {
    auto c = make(k.f, true);
    auto r = run_script(*c, *v.tok, k.want);
    INFO(to_string(k.f), ": ", r.text);
    CHECK(has(r.phases, turn_phase::call));
    CHECK((r.eos || r.finished));
    auto p = parse(k.f, r.text);
    CHECK(p.errors.empty());
    CHECK(p.message.tool_calls.size() == 1);
    CHECK(p.message.content.empty());  // the marker never leaks into content
  }
}

TEST_CASE("auto + response schema: the first non-space output decides between a call and the answer") {
  auto& v = vocab();
  const std::string call = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>";
  SUBCASE("a call") {
    auto c = make(template_family::chatml, false, answer_schema);
    auto r = run_script(*c, *v.tok, call);
    CHECK(r.phases == std::vector<turn_phase>{turn_phase::deciding, turn_phase::call, turn_phase::done});
    CHECK(parse(template_family::chatml, r.text).message.tool_calls.size() == 1);
  }
  SUBCASE("an answer that would not have matched the schema") {
    auto c = make(template_family::chatml, true, answer_schema);
    auto r = run_script(*c, *v.tok, " {\"answer\": \"four\"}");
    INFO(r.text);
    CHECK(r.phases == std::vector<turn_phase>{turn_phase::deciding, turn_phase::answer});
    CHECK((r.eos || r.finished));
    CHECK(grammar::validate_json(answer_schema, r.text).empty());
  }
  SUBCASE("Qwen3 thinks freely first, then answers to the schema") {
    auto c = make(template_family::qwen3, true, answer_schema);
    auto r = run_script(*c, *v.tok, "<think>\nmaybe <tool_call> or {not json\n</think>\n\n{\"answer\": 4}");
    INFO(r.text);
    CHECK(r.phases ==
          std::vector<turn_phase>{turn_phase::deciding, turn_phase::think, turn_phase::deciding, turn_phase::answer});
    const size_t end = r.text.find("</think>");
    REQUIRE(end != std::string::npos);
    CHECK(grammar::validate_json(answer_schema, r.text.substr(end + 8)).empty());
  }
  SUBCASE("after parallel calls only another call or the end of the turn") {
    auto c = make(template_family::chatml, true, answer_schema);
    auto r = run_script(*c, *v.tok, call + "\nDone: {\"answer\": 1}");
    INFO(r.text);
    CHECK(r.eos);
    auto p = parse(template_family::chatml, r.text);
    CHECK(p.errors.empty());
    CHECK(p.message.content.empty());
  }
  SUBCASE("Llama 3: {\"name\" opens a call, other objects are answers") {
    auto c = make(template_family::llama3, true, answer_schema);
    auto r = run_script(*c, *v.tok, "{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}");
    CHECK(has(r.phases, turn_phase::call));
    CHECK(parse(template_family::llama3, r.text).message.tool_calls.size() == 1);
    c = make(template_family::llama3, true, answer_schema);
    r = run_script(*c, *v.tok, "{\"answer\": 7}");
    CHECK(r.phases.back() == turn_phase::answer);
    CHECK(grammar::validate_json(answer_schema, r.text).empty());
  }
}

TEST_CASE("prefill: text that opens a call constrains from the first sampled token") {
  auto& v = vocab();
  auto c = make(template_family::chatml, false);
  c->accept_text("<tool_call>\n{\"name\": \"");
  CHECK(c->phase() == turn_phase::call);
  auto r = run_script(*c, *v.tok, "nothing useful");
  auto p = parse(template_family::chatml, "<tool_call>\n{\"name\": \"" + r.text, false);
  CHECK(p.errors.empty());
  CHECK(p.message.tool_calls.size() == 1);
  // The calls the templates print back are taken whole (then only the end of the turn is left).
  for (auto [f, said] : std::initializer_list<std::pair<template_family, const char*>>{
           {template_family::plain, R"( <tool_call>{"name":"search","arguments":{"q":"x"}}</tool_call>)"},
           {template_family::plain,
            R"( <tool_call>{"name":"get_weather","arguments":{"city":"London","days":2}}</tool_call>)"},
           {template_family::mistral,
            R"([TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}, "id": "a73c32c4f"}])"}}) {
    c = make(f, false);
    c->accept_text(said);
    CHECK_MESSAGE(c->phase() == turn_phase::done, std::string(to_string(f)), ": ", std::string(to_string(c->phase())));
  }
  {
    grammar::turn_constraint_options o;
    o.family = template_family::plain;
    o.tools = {
        {"get_weather", "",
         R"({"type":"object","properties":{"city":{"enum":["Paris","London"]},"days":{"type":"integer","minimum":1,"maximum":3}},"required":["city","days"],"additionalProperties":false})"}};
    o.parallel_tool_calls = false;
    std::string err;
    auto e = grammar::turn_constraint::make(o, vocab().index, &err);
    REQUIRE(e);
    e->accept_text(R"( <tool_call>{"name":"get_weather","arguments":{"city":"London","days":2}}</tool_call>)");
    CHECK_MESSAGE(e->phase() == turn_phase::done, std::string(to_string(e->phase())));
  }
  // Several phases in one piece of text.
  c = make(template_family::qwen3, true, answer_schema);
  c->accept_text("<think>\nhm <tool_call></think>\n\n{\"answer\": 1}");
  CHECK(c->phase() == turn_phase::answer);
  c = make(template_family::chatml, true, answer_schema);
  c->accept_text("\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>\n<tool_call>\n{");
  CHECK(c->phase() == turn_phase::call);
  // Text no grammar takes leaves the turn unconstrained instead of failing.
  c = make(template_family::chatml, false, answer_schema);
  c->accept_text("Well");
  CHECK(c->phase() == turn_phase::free);
}

namespace {

// A scripted model fond of whitespace (greedy): whitespace-only pieces first, then EOS, then
// "}" and "]", then the longest piece; or (fond = false) one that never writes whitespace it
// can leave out. Runs c to EOS or to its end.
struct ws_run {
  std::string text;
  int32_t n_tokens = 0;     // not counting EOS
  int32_t n_ws_tokens = 0;  // whitespace-only tokens among them
  bool eos = false;
};
ws_run run_ws_script(grammar::token_constraint& c, const tokenizer& tok, bool fond, int max_steps = 2000) {
  const int32_t n = tok.n_vocab();
  std::vector<float> logits(static_cast<size_t>(n));
  auto is_ws_piece = [&](const std::string& p) { return !p.empty() && p.find_first_not_of(" \t\r\n") == std::string::npos; };
  for (token_id t = 0; t < n; ++t) {
    const std::string& p = tok.pieces()[size_t(t)];
    float l = float(p.size()) - float(t) * 1e-6f;
    if (tok.is_eog(t)) l = 1500;
    else if (p.empty() || tok.is_control(t)) l = -1000;
    else if (is_ws_piece(p)) l = fond ? 2000 + float(p.size()) : -500;
    else if (p == "}" || p == "]") l = 1200;
    logits[size_t(t)] = l;
  }
  sampler greedy(sampling_params{});
  std::vector<uint32_t> mask;
  ws_run r;
  for (int step = 0; step < max_steps && !c.is_finished(); ++step) {
    c.fill_mask(mask);
    std::vector<float> l = logits;  // the sampler masks in place
    const token_id t = greedy.sample(l.data(), n, mask);
    REQUIRE(t >= 0);
    REQUIRE(c.accept(t));
    if (tok.is_eog(t)) {
      r.eos = true;
      break;
    }
    r.text += tok.pieces()[size_t(t)];
    r.n_tokens++;
    r.n_ws_tokens += is_ws_piece(tok.pieces()[size_t(t)]);
  }
  return r;
}

// text without the one space each ':' or ',' may have after it.
std::string drop_sep_spaces(std::string text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i)
    if (!(text[i] == ' ' && i > 0 && (text[i - 1] == ':' || text[i - 1] == ','))) out += text[i];
  return out;
}

}  // namespace

TEST_CASE("compact JSON: a model fond of whitespace closes a forced call in the fewest tokens, and the turn ends") {
  auto& v = vocab();
  const std::vector<tool_def> ping = {{"ping", "Ping.", R"({"type":"object","properties":{},"additionalProperties":false})"}};
  const std::string call = "<tool_call>\n{\"name\":\"ping\",\"arguments\":{}}\n</tool_call>";
  auto forced = [&](bool parallel, json_whitespace ws) {
    std::string err;
    auto c = grammar::make_tool_call_constraint(template_family::chatml, ping, {tool_choice_mode::required, ""}, parallel,
                                                v.index, &err, ws);
    REQUIRE_MESSAGE(c, err);
    return c;
  };
  for (bool parallel : {false, true}) {
    INFO("parallel_tool_calls ", parallel);
    auto fond = run_ws_script(*forced(parallel, json_whitespace::spaced), *v.tok, true);
    auto plain = run_ws_script(*forced(parallel, json_whitespace::free), *v.tok, false);
    MESSAGE("tokens: fond of whitespace " << fond.n_tokens << ", never whitespace " << plain.n_tokens);
    // One call, then the end: whitespace never forces another call (with parallel calls the
    // "\n" after the call may end the output; another call would need "<tool_call>" next).
    CHECK(drop_sep_spaces(fond.text) == call + (parallel ? "\n" : ""));
    CHECK(fond.eos == parallel);  // without parallel calls the constraint ends at "</tool_call>" itself
    // The fewest tokens: those of a model that writes no whitespace, plus at most one space
    // token after each of the call's ':' and ',' (3), which the chat templates print too.
    CHECK(fond.n_ws_tokens <= 3 + (parallel ? 1 : 0));
    CHECK(fond.n_tokens <= plain.n_tokens + 3);
    // The documented option: free whitespace (up to 16 bytes a gap) lets the same model pad
    // (here one 16-space token a gap; one space at a time on vocabularies without those).
    auto padded = run_ws_script(*forced(parallel, json_whitespace::free), *v.tok, true);
    CHECK(padded.text.size() > fond.text.size() + 30);
  }
  // response_format: the schema answer is compact too (at most a newline or two may lead).
  std::string err;
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer","minimum":1,"maximum":1}},"required":["a"]})";
  auto a = grammar::make_json_constraint(schema, v.index, &err);
  REQUIRE_MESSAGE(a, err);
  auto ra = run_ws_script(*a, *v.tok, true);
  MESSAGE("answer: " << ra.text);
  CHECK(ra.text.find_first_not_of(" \t\r\n") <= 2);
  CHECK(drop_sep_spaces(ra.text.substr(ra.text.find_first_not_of(" \t\r\n"))) == "{\"a\":1}");
}
