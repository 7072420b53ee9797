// JSON Schema → grammar → token mask: compile/refuse, validation, matcher
// accept/reject tables, the token mask against a brute-force reference, and a
// randomised property test: walks choosing random allowed tokens on the 32k
// llama-spm and 512-token tiny vocabularies always end in JSON that validates.
#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar/schema.h"
#include "grammar/vocab_pieces.h"
#include "json/json.h"
#include "test_env.h"

using namespace agentq;
using namespace agentq::grammar;

static const gguf_vocab& vocab_32k() {
  static gguf_vocab v = [] {
    gguf_vocab out;
    std::string err;
    REQUIRE_MESSAGE(load_gguf_vocab((test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string(), &out, &err), err);
    return out;
  }();
  return v;
}
static const gguf_vocab& vocab_tiny() {
  static gguf_vocab v = [] {
    gguf_vocab out;
    std::string err;
    REQUIRE_MESSAGE(load_gguf_vocab(test::tiny_model().string(), &out, &err), err);
    return out;
  }();
  return v;
}

static bool matches(std::string_view schema_text, std::string_view text, json_whitespace ws = json_whitespace::spaced) {
  compile_result r = compile_schema(schema_text, ws);
  REQUIRE_MESSAGE(r.value, r.error);
  matcher m(*r.value);
  match_state s = m.initial();
  return m.advance_bytes(s, text) && m.can_finish(s);
}

TEST_CASE("refuses unsupported schemas up front, naming keyword and place") {
  struct { const char* schema; const char* message; } bad[] = {
      {R"({"type":"object","properties":{"x":{"patternProperties":{}}}})",
       "unsupported JSON Schema keyword 'patternProperties' at /properties/x"},
      {R"({"type":"string","pattern":"^a"})", "unsupported JSON Schema keyword 'pattern' at /"},
      {R"({"oneOf":[{"type":"string"}]})", "unsupported JSON Schema keyword 'oneOf' at /"},
      {R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
       "recursive $ref"},
      {R"({"$ref":"#/$defs/missing"})", "unresolved $ref"},
      {R"({"$ref":"http://example.com/s.json"})", "unsupported $ref"},
      {R"({"type":"strin"})", "unknown type 'strin'"},
      {R"({"type":"string","minLength":5,"maxLength":2})", "minLength > maxLength"},
      {R"({"type":"integer","minimum":3,"maximum":2})", "empty number range"},
      {R"({"type":"object","required":["a"],"additionalProperties":false})", "required property 'a' is not allowed"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "'anyOf' with sibling keyword 'type'"},
      {R"({"enum":[1,2],"type":"string"})", "no enum value satisfies"},
      {R"({"type":"object",)", "not valid JSON"},
      {R"({"items":[{"type":"string"}]})", "tuple-form 'items'"},
  };
  for (const auto& b : bad) {
    compile_result r = compile_schema(b.schema);
    CHECK_MESSAGE(!r.value, b.schema);
    CHECK_MESSAGE(r.error.find(b.message) != std::string::npos, b.schema, " -> ", r.error);
  }
  CHECK(compile_schema(R"({"type":"object","title":"T","description":"d","properties":{"a":{"type":"string","format":"date"}}})").value);
}

TEST_CASE("validator") {
  const char* schema = R"({"type":"object","properties":{
      "name":{"type":"string","minLength":1,"maxLength":3},
      "n":{"type":"integer","minimum":0,"exclusiveMaximum":10},
      "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},
      "opt":{"anyOf":[{"type":"null"},{"type":"number"}]}},
      "required":["name"],"additionalProperties":false})";
  CHECK(validate_json(schema, R"({"name":"ab","n":3,"tags":["a"],"opt":null})").empty());
  CHECK(validate_json(schema, R"({"name":"é€😀"})").empty());   // 3 code points
  CHECK(validate_json(schema, R"({"name":"x","n":2.0})").empty());
  auto has = [](const std::vector<std::string>& errs, const std::string& s) {
    for (const auto& e : errs) if (e.find(s) != std::string::npos) return true;
    return false;
  };
  CHECK(has(validate_json(schema, R"({})"), "missing required property \"name\""));
  CHECK(has(validate_json(schema, R"({"name":"abcd"})"), "/name: string longer than maxLength 3"));
  CHECK(has(validate_json(schema, R"({"name":"a","n":10})"), "/n: number not below exclusiveMaximum 10"));
  CHECK(has(validate_json(schema, R"({"name":"a","n":1.5})"), "/n: expected integer, got number"));
  CHECK(has(validate_json(schema, R"({"name":"a","tags":["c"]})"), "/tags/0: value is not one of the enum values"));
  CHECK(has(validate_json(schema, R"({"name":"a","tags":["a","a","b"]})"), "more than maxItems 2"));
  CHECK(has(validate_json(schema, R"({"name":"a","x":1})"), "unexpected property \"x\""));
  CHECK(has(validate_json(schema, R"({"name":"a","opt":"s"})"), "/opt: value matches none of the anyOf"));
  CHECK(has(validate_json(schema, R"([1])"), "expected object, got array"));
}

TEST_CASE("matcher accepts what validates and refuses the rest") {
  const char* obj = R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":120},
                        "b":{"type":"string","maxLength":3},"c":{"type":"boolean"}},"required":["a"],
                        "additionalProperties":false})";
  CHECK(matches(obj, R"({"a":1})"));
  // Whitespace: spaced (the default) takes one space after ':' and ',' and a newline or two
  // before the value, nothing else; free takes pretty-printed JSON.
  CHECK(matches(obj, "\n{\"b\": \"xy\", \"a\": -5,\"c\": true}"));
  CHECK_FALSE(matches(obj, " {\n  \"b\": \"xy\",\n  \"a\": -5, \"c\": true\n}"));
  CHECK_FALSE(matches(obj, R"({"a":  1})"));
  CHECK_FALSE(matches(obj, R"({"a" : 1})"));
  CHECK_FALSE(matches(obj, R"({ "a": 1})"));
  CHECK_FALSE(matches(obj, R"({"a": 1 })"));
  CHECK_FALSE(matches(obj, "   {\"a\": 1}"));
  CHECK(matches(obj, " {\n  \"b\": \"xy\",\n  \"a\": -5, \"c\": true\n}", json_whitespace::free));
  CHECK(matches(obj, R"({"a":120,"b":"\u00e9\n"})"));
  CHECK_FALSE(matches(obj, R"({"b":"x"})"));            // a is required
  CHECK_FALSE(matches(obj, R"({"a":121})"));
  CHECK_FALSE(matches(obj, R"({"a":-6})"));
  CHECK_FALSE(matches(obj, R"({"a":1.5})"));
  CHECK_FALSE(matches(obj, R"({"a":1,"b":"abcd"})"));
  CHECK_FALSE(matches(obj, R"({"a":1,"a":2})"));        // no duplicate keys
  CHECK_FALSE(matches(obj, R"({"a":1,"d":2})"));
  CHECK_FALSE(matches(obj, R"({"a":01})"));
  CHECK_FALSE(matches(obj, R"({"a":1} )"));             // nothing after the value
  CHECK_FALSE(matches(obj, R"({"a":1,"b":"\ud800"})")); // no surrogate escapes
  CHECK_FALSE(matches(obj, "{\"a\":1,\"b\":\"\xff\"}"));
  const char* num = R"({"type":"number","exclusiveMinimum":0,"maximum":1.5})";
  CHECK(matches(num, "0.001"));
  CHECK(matches(num, "1.5"));
  CHECK_FALSE(matches(num, "0"));
  CHECK_FALSE(matches(num, "1.51"));
  CHECK_FALSE(matches(num, "-0.5"));
  const char* any = "{}";
  CHECK(matches(any, R"({"x":[1,2.5e3,"s",null,{"y":false}]})"));
  CHECK(matches(any, "-12.5"));
  const char* arr = R"({"type":"array","items":{"type":["string","null"]},"minItems":1,"maxItems":2})";
  CHECK(matches(arr, R"(["a",null])"));
  CHECK_FALSE(matches(arr, "[]"));
  CHECK_FALSE(matches(arr, R"(["a","b","c"])"));
  const char* en = R"({"enum":["red","green",{"k":[1,2]}]})";
  CHECK(matches(en, "\"green\""));
  CHECK(matches(en, R"({"k":[1,2]})"));
  CHECK_FALSE(matches(en, "\"blue\""));
}

// Reference: a token is allowed iff feeding its bytes to the matcher succeeds.
static std::vector<uint32_t> brute_mask(const matcher& m, const match_state& s, const gguf_vocab& v) {
  std::vector<uint32_t> mask((v.pieces.size() + 31) / 32, 0);
  for (size_t t = 0; t < v.pieces.size(); t++) {
    bool eos = std::find(v.eos_ids.begin(), v.eos_ids.end(), static_cast<token_id>(t)) != v.eos_ids.end();
    bool ok;
    if (eos) {
      ok = m.can_finish(s);
    } else if (v.pieces[t].empty()) {
      ok = false;
    } else {
      match_state tmp = s;
      ok = m.advance_bytes(tmp, v.pieces[t]);
    }
    if (ok) mask[t / 32] |= 1u << (t % 32);
  }
  return mask;
}

static const char* walk_schemas[] = {
    R"({"type":"object","properties":{"location":{"type":"string","maxLength":20},
        "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},
        "required":["location"],"additionalProperties":false})",
    R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{
        "id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
        "required":["id"]},"minItems":1,"maxItems":3},"ok":{"type":"boolean"}},"required":["items","ok"]})",
    R"({"anyOf":[{"type":"string","minLength":2,"maxLength":5},{"type":"number","minimum":-2.5,"maximum":1000},
        {"type":"null"}]})",
    R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
        "required":["x","y"],"additionalProperties":false}},"type":"object","properties":{"a":{"$ref":"#/$defs/pt"},
        "b":{"type":["array","null"],"items":{"$ref":"#/$defs/pt"},"maxItems":2}},"required":["a"]})",
    R"({"type":"object","properties":{"kind":{"const":"point"},"v":{"type":"number","exclusiveMinimum":0,
        "exclusiveMaximum":1}},"required":["kind","v"]})",
    R"({"type":"string","minLength":3,"maxLength":6})",
    R"({"type":"array","items":{},"maxItems":4})",
};

// Random walk: random allowed tokens (EOS with probability 1/3 when allowed).
// Returns the text, or nullopt when it did not finish within max_steps.
static std::optional<std::string> random_walk(token_constraint& c, const gguf_vocab& v, uint64_t seed,
                                              int max_steps, bool check_brute, const matcher* m = nullptr) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask;
  std::string text;
  std::vector<token_id> allowed;
  for (int step = 0; step < max_steps; step++) {
    c.fill_mask(mask);
    allowed.clear();
    bool eos_ok = false;
    for (size_t t = 0; t < v.pieces.size(); t++) {
      if (!(mask[t / 32] >> (t % 32) & 1)) continue;
      if (std::find(v.eos_ids.begin(), v.eos_ids.end(), static_cast<token_id>(t)) != v.eos_ids.end()) eos_ok = true;
      else allowed.push_back(static_cast<token_id>(t));
    }
    REQUIRE_MESSAGE((eos_ok || !allowed.empty()), "dead end after: ", text);
    CHECK(eos_ok == c.is_complete());
    if (eos_ok && (allowed.empty() || rng() % 3 == 0)) {
      REQUIRE(c.accept(v.eos_ids[0]));
      return text;
    }
    token_id t = allowed[rng() % allowed.size()];
    REQUIRE(c.accept(t));
    text += v.pieces[t];
  }
  return std::nullopt;
}

static void property_walks(const gguf_vocab& v, int n_seeds, int max_steps) {
  auto vocab = make_vocab_index(v.pieces, v.eos_ids);
  int n_done = 0, n_total = 0;
  for (const char* schema : walk_schemas) {
    std::string err;
    auto parsed = parse_schema(schema, &err);
    REQUIRE_MESSAGE(parsed, err);
    for (int seed = 0; seed < n_seeds; seed++) {
      std::string e;
      auto c = make_json_constraint(schema, vocab, &e);
      REQUIRE_MESSAGE(c, e);
      n_total++;
      auto text = random_walk(*c, v, 1000 * seed + 17, max_steps, false);
      if (!text) continue;
      n_done++;
      json::parse_options opt;
      opt.allow_duplicate_keys = true;   // free-form objects may repeat keys (documented)
      auto val = json::parse(*text, &err, opt);
      REQUIRE_MESSAGE(val, err, " in ", *text);
      auto errors = validate(*parsed, *val);
      CHECK_MESSAGE(errors.empty(), *text, " -> ", errors.empty() ? "" : errors[0]);
    }
  }
  MESSAGE(n_done, "/", n_total, " walks finished");
  CHECK(n_done * 2 >= n_total);
}

TEST_CASE("random walks on the tiny 512-token vocabulary always validate") {
  property_walks(vocab_tiny(), 40, 3000);
}

TEST_CASE("random walks on the 32k llama-spm vocabulary always validate") {
  property_walks(vocab_32k(), 8, 1500);
}

TEST_CASE("token mask equals the brute-force mask") {
  for (const gguf_vocab* v : {&vocab_tiny(), &vocab_32k()}) {
    auto vocab = make_vocab_index(v->pieces, v->eos_ids);
    bool big = v->pieces.size() > 1000;
    for (const char* schema : walk_schemas) {
      compile_result r = compile_schema(schema);
      REQUIRE(r.value);
      matcher m(*r.value);
      for (int seed = 0; seed < (big ? 2 : 6); seed++) {
        token_constraint c(r.value, vocab);
        match_state s = m.initial();
        std::mt19937_64 rng(seed);
        std::vector<uint32_t> mask;
        for (int step = 0; step < (big ? 12 : 60); step++) {
          c.fill_mask(mask);
          REQUIRE(mask == brute_mask(m, s, *v));
          std::vector<token_id> allowed;
          for (size_t t = 0; t < v->pieces.size(); t++)
            if ((mask[t / 32] >> (t % 32) & 1) && !v->pieces[t].empty()) allowed.push_back(static_cast<token_id>(t));
          if (allowed.empty()) break;
          token_id t = allowed[rng() % allowed.size()];
          REQUIRE(c.accept(t));
          REQUIRE(m.advance_bytes(s, v->pieces[t]));
        }
      }
    }
  }
}

TEST_CASE("accept refuses disallowed tokens and leaves the state unchanged") {
  const auto& v = vocab_tiny();
  auto c = make_json_constraint(R"({"type":"boolean"})", v.pieces, v.eos_ids, nullptr);
  REQUIRE(c);
  CHECK_FALSE(c->is_complete());
  CHECK_FALSE(c->accept(v.eos_ids[0]));
  CHECK(c->accept_bytes("tr"));
  CHECK_FALSE(c->accept_bytes("x"));
  CHECK(c->accept_bytes("ue"));
  CHECK(c->is_complete());
  CHECK(c->is_finished());
  CHECK(c->accept(v.eos_ids[0]));
}

TEST_CASE("schemas are cached by text") {
  const char* s = R"({"type":"object","properties":{"q":{"type":"string"}}})";
  compile_result a = compile_schema(s), b = compile_schema(s);
  REQUIRE(a.value);
  CHECK(a.value == b.value);
}

TEST_CASE("tool-call grammar: wrapper + name + that tool's arguments") {
  std::vector<tool_def> tools = {
      {"get_weather", "w", R"({"type":"object","properties":{"city":{"type":"string","maxLength":10}},"required":["city"]})"},
      {"add", "a", R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]})"}};
  auto check = [&](chat::template_family f, tool_choice ch, bool par, const char* text, bool want) {
    compile_result r = compile_tool_call_grammar(f, tools, ch, par);
    REQUIRE_MESSAGE(r.value, r.error);
    matcher m(*r.value);
    match_state s = m.initial();
    bool ok = m.advance_bytes(s, text) && m.can_finish(s);
    CHECK_MESSAGE(ok == want, text);
  };
  tool_choice req{tool_choice_mode::required, ""};
  using tf = chat::template_family;
  check(tf::chatml, req, true, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"x\": 1, \"y\": 2}}\n</tool_call>", true);
  check(tf::chatml, req, true,
        "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"x\":1,\"y\":2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>", true);
  check(tf::chatml, req, false,
        "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"x\":1,\"y\":2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"x\":1,\"y\":2}}\n</tool_call>", false);
  check(tf::chatml, req, true, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>", false);
  check(tf::chatml, req, true, "<tool_call>\n{\"arguments\": {\"x\": 1, \"y\": 2}, \"name\": \"add\"}\n</tool_call>", false);
  check(tf::chatml, tool_choice{tool_choice_mode::named, "get_weather"}, true,
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"x\": 1, \"y\": 2}}\n</tool_call>", false);
  check(tf::llama3, req, true, "{\"name\": \"add\", \"parameters\": {\"x\": 1, \"y\": 2}}", true);
  check(tf::mistral, req, true,
        "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"x\": 1, \"y\": 2}}, "
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\"}}]", true);
  check(tf::mistral, req, true, "[{\"name\": \"add\", \"arguments\": {\"x\": 1, \"y\": 2}}]", true);
  check(tf::plain, req, true, "<tool_call>{\"name\":\"add\",\"arguments\":{\"x\":1,\"y\":2}}</tool_call>", true);
  CHECK(compile_tool_call_grammar(tf::chatml, tools, tool_choice{tool_choice_mode::named, "nope"}, true)
            .error.find("unknown tool 'nope'") != std::string::npos);
  std::vector<tool_def> bad = {{"t", "", R"({"type":"object","properties":{"x":{"not":{}}}})"}};
  CHECK(compile_tool_call_grammar(tf::chatml, bad, req, true).error ==
        "tool 't': unsupported JSON Schema keyword 'not' at /properties/x");

  // Switching on mid-generation: the detector saw "<tool_call>" already.
  const auto& v = vocab_32k();
  auto vocab = make_vocab_index(v.pieces, v.eos_ids);
  auto c = make_tool_call_constraint(tf::chatml, tools, tool_choice{}, true, vocab, nullptr);
  REQUIRE(c);
  CHECK(c->accept_bytes("<tool_call>\n{\"name\": \"ad"));
  CHECK_FALSE(c->accept_bytes("x"));
  CHECK(c->accept_bytes("d\", \"arguments\": {\"x\": 1, \"y\": 2}}\n</tool_call>"));
  CHECK(c->is_complete());
}
