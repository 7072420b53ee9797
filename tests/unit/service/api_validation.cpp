// POST /v1/jobs validation table: each bad input -> its status and the field it names.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "api/model_catalog.h"
#include "api/validate.h"
#include "net/ssrf_guard.h"

using namespace agentq;
using json = nlohmann::json;

namespace {
// A model with a 64-token context; "prompt too long" past 200 characters, as the engine would say.
struct fake_catalog : api::model_catalog {
  std::vector<api::model_info> list() const override { return {{"tiny", "llama", 64, true}}; }
  std::optional<std::string> validate(const std::string&, const turn_request& r) const override {
    size_t n = 0;
    for (const auto& m : r.messages) n += m.content.size();
    if (n > 200) return "prompt is 300 tokens, over the model's context of 64";
    if (r.response_schema_json.find("\"bogus_type\"") != std::string::npos)
      return "response_format: invalid JSON Schema: unknown type 'bogus_type'";
    return std::nullopt;
  }
};

json good() {
  return json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}],
    "webhook":{"url":"http://127.0.0.1:9/hook","events":["job.completed"]},"metadata":{"team":"a"}})");
}

struct outcome {
  bool ok;
  int status;
  std::string param;
};

outcome run(const json& body) {
  fake_catalog cat;
  std::string err;
  net::ssrf_guard guard(*net::parse_cidr_list("127.0.0.0/8", &err));
  api::validation_error e;
  auto v = api::validate_job(body, cat, guard, api::validation_limits{}, &e);
  return {bool(v), v ? 0 : http::status_of(e.kind), e.param};
}

json with(json b, const std::string& pointer, json value) {
  b[json::json_pointer(pointer)] = std::move(value);
  return b;
}
json without(json b, const std::string& key) {
  b.erase(key);
  return b;
}
}  // namespace

TEST_CASE("a good request passes and converts to engine types") {
  fake_catalog cat;
  std::string err;
  net::ssrf_guard guard(*net::parse_cidr_list("127.0.0.0/8", &err));
  api::validation_error e;
  json b = good();
  b["temperature"] = 0.5;
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  b["max_tokens_per_turn"] = 32;
  auto v = api::validate_job(b, cat, guard, {}, &e);
  REQUIRE_MESSAGE(v, e.message);
  CHECK(v->model == "tiny");
  CHECK(v->first_turn.messages.size() == 1);
  CHECK(v->first_turn.messages[0].role == role::user);
  CHECK(v->first_turn.tools.size() == 1);
  CHECK(v->first_turn.choice.mode == tool_choice_mode::named);
  CHECK(v->first_turn.sampling.temperature == doctest::Approx(0.5));
  CHECK(v->first_turn.max_tokens == 32);
}

TEST_CASE("validation table") {
  json big_tool = good()["tools"][0];
  big_tool["function"]["description"] = std::string(40000, 'x');
  json many_tools = json::array();
  for (int i = 0; i < 65; ++i)
    many_tools.push_back({{"type", "function"}, {"function", {{"name", "t" + std::to_string(i)}}}});
  struct row {
    const char* what;
    json body;
    int status;
    std::string param;
  } rows[] = {
      {"not an object", json::array(), 400, ""},
      {"missing model", without(good(), "model"), 400, "model"},
      {"model wrong type", with(good(), "/model", 5), 400, "model"},
      {"unknown model", with(good(), "/model", "gpt-9"), 400, "model"},
      {"unknown field", with(good(), "/bogus", 1), 400, "bogus"},
      {"missing messages", without(good(), "messages"), 400, "messages"},
      {"messages not array", with(good(), "/messages", "hi"), 400, "messages"},
      {"empty messages", with(good(), "/messages", json::array()), 400, "messages"},
      {"bad role", with(good(), "/messages/0/role", "wizard"), 400, "messages[0].role"},
      {"content wrong type", with(good(), "/messages/0/content", 7), 400, "messages[0].content"},
      {"tools not array", with(good(), "/tools", json::object()), 400, "tools"},
      {"too many tools", with(good(), "/tools", many_tools), 400, "tools"},
      {"tool too large", with(good(), "/tools/0", big_tool), 400, "tools[0]"},
      {"tool bad name", with(good(), "/tools/0/function/name", "no spaces"), 400, "tools[0].function.name"},
      {"tool schema not object", with(good(), "/tools/0/function/parameters", "x"), 400, "tools[0].function.parameters"},
      {"tool schema bad type", with(good(), "/tools/0/function/parameters/type", 5), 400,
       "tools[0].function.parameters.type"},
      {"tool exec private url", with(good(), "/tools/0/execution", {{"type", "http"}, {"url", "http://10.0.0.1/x"}}), 400,
       "tools[0].execution.url"},
      {"tool exec bad timeout",
       with(good(), "/tools/0/execution", {{"type", "http"}, {"url", "http://127.0.0.1:9/"}, {"timeout_ms", 0}}), 400,
       "tools[0].execution.timeout_ms"},
      {"tool_choice unknown name", with(good(), "/tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}),
       400, "tool_choice.function.name"},
      {"tool_choice bad string", with(good(), "/tool_choice", "sometimes"), 400, "tool_choice"},
      {"temperature too high", with(good(), "/temperature", 5), 400, "temperature"},
      {"temperature string", with(good(), "/temperature", "hot"), 400, "temperature"},
      {"top_k negative", with(good(), "/top_k", -1), 400, "top_k"},
      {"top_k float", with(good(), "/top_k", 1.5), 400, "top_k"},
      {"seed negative", with(good(), "/seed", -3), 400, "seed"},
      {"max_turns zero", with(good(), "/max_turns", 0), 400, "max_turns"},
      {"max_tokens_per_turn over context", with(good(), "/max_tokens_per_turn", 65), 400, "max_tokens_per_turn"},
      {"deadline negative", with(good(), "/deadline_seconds", -1), 400, "deadline_seconds"},
      {"bad priority", with(good(), "/priority", "urgent"), 400, "priority"},
      {"webhook not object", with(good(), "/webhook", "http://x"), 400, "webhook"},
      {"webhook metadata ip", with(good(), "/webhook/url", "http://169.254.169.254/latest"), 400, "webhook.url"},
      {"webhook decimal ip", with(good(), "/webhook/url", "http://2130706433/"), 400, "webhook.url"},
      {"webhook ftp", with(good(), "/webhook/url", "ftp://127.0.0.1/"), 400, "webhook.url"},
      {"webhook private", with(good(), "/webhook/url", "http://192.168.1.1/"), 400, "webhook.url"},
      {"webhook bad event", with(good(), "/webhook/events/0", "job.exploded"), 400, "webhook.events[0]"},
      {"webhook bad secret", with(good(), "/webhook/secret", "hunter2"), 400, "webhook.secret"},
      {"metadata not object", with(good(), "/metadata", json::array()), 400, "metadata"},
      {"metadata value not string", with(good(), "/metadata/team", 1), 400, "metadata.team"},
      {"response_format bad type", with(good(), "/response_format", {{"type", "xml"}}), 400, "response_format.type"},
      {"response_format missing schema", with(good(), "/response_format", {{"type", "json_schema"}, {"json_schema", json::object()}}),
       400, "response_format.json_schema.schema"},
      {"engine rejects schema",
       with(good(), "/response_format",
            {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "bogus_type"}}}}}}),
       400, "response_format"},
      {"prompt over context", with(good(), "/messages/0/content", std::string(300, 'a')), 400, "messages"},
      {"tool message without id", with(good(), "/messages/0", {{"role", "tool"}, {"content", "x"}}), 400,
       "messages[0].tool_call_id"},
      {"assistant bad tool call args",
       with(good(), "/messages/0",
            {{"role", "assistant"}, {"tool_calls", {{{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}),
       400, "messages[0].tool_calls[0].function.arguments"},
      // Predicted Outputs (#32)
      {"prediction not an object", with(good(), "/prediction", "text"), 400, "prediction"},
      {"prediction bad type", with(good(), "/prediction", {{"type", "file"}, {"content", "x"}}), 400, "prediction.type"},
      {"prediction no content", with(good(), "/prediction", {{"type", "content"}}), 400, "prediction.content"},
      {"prediction content number", with(good(), "/prediction", {{"type", "content"}, {"content", 1}}), 400,
       "prediction.content"},
      {"prediction part not text",
       with(good(), "/prediction", {{"type", "content"}, {"content", json::array({{{"type", "image"}, {"text", "x"}}})}}),
       400, "prediction.content[0].type"},
  };
  for (const auto& r : rows) {
    auto o = run(r.body);
    INFO(r.what);
    CHECK_FALSE(o.ok);
    CHECK(o.status == r.status);
    CHECK(o.param == r.param);
  }
}

TEST_CASE("prediction: a string or text parts become the first turn's prediction (#32)") {
  fake_catalog cat;
  std::string err;
  net::ssrf_guard guard(*net::parse_cidr_list("127.0.0.0/8", &err));
  api::validation_error e;
  auto v = api::validate_job(with(good(), "/prediction", {{"type", "content"}, {"content", "old file"}}), cat, guard,
                             api::validation_limits{}, &e);
  REQUIRE_MESSAGE(v, e.message);
  CHECK(v->first_turn.prediction == "old file");
  json parts = json::array({{{"type", "text"}, {"text", "old "}}, {{"type", "text"}, {"text", "file"}}});
  v = api::validate_job(with(good(), "/prediction", {{"type", "content"}, {"content", parts}}), cat, guard,
                        api::validation_limits{}, &e);
  REQUIRE_MESSAGE(v, e.message);
  CHECK(v->first_turn.prediction == "old file");
}

TEST_CASE("body parsing: malformed JSON and bad UTF-8") {
  api::validation_error e;
  CHECK_FALSE(api::parse_body("{\"model\":", &e));
  CHECK(http::status_of(e.kind) == 400);
  CHECK(e.message.find("invalid JSON at byte") != std::string::npos);
  CHECK_FALSE(api::parse_body("{\"model\":\"\xff\xfe\"}", &e));
  CHECK(e.message.find("UTF-8") != std::string::npos);
  CHECK_FALSE(api::is_valid_utf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(api::is_valid_utf8("\xed\xa0\x80"));      // surrogate
  CHECK_FALSE(api::is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  CHECK(api::is_valid_utf8("h\xc3\xa9llo \xf0\x9f\x98\x80"));
  CHECK(api::parse_body("{\"a\":\"\\u00e9\"}", &e));
}

TEST_CASE("body parsing: duplicate keys, non-JSON Content-Type, messages without parser codes (#24 item 10)") {
  api::validation_error e;
  CHECK_FALSE(api::parse_body(R"({"model":"a","model":"b"})", &e));
  CHECK(http::status_of(e.kind) == 400);
  CHECK(e.message.find("'model' appears twice") != std::string::npos);
  CHECK_FALSE(api::parse_body(R"({"a":{"x":1,"y":{"x":2},"x":3}})", &e));  // nested: the inner x is another object's
  CHECK(e.message.find("'x' appears twice") != std::string::npos);
  CHECK(api::parse_body(R"({"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]})", &e));

  CHECK_FALSE(api::parse_body(R"({"model":"a"})", "text/plain", &e));
  CHECK(http::status_of(e.kind) == 400);
  CHECK(e.param == "Content-Type");
  CHECK(api::parse_body(R"({"model":"a"})", "application/json; charset=utf-8", &e));
  CHECK(api::parse_body(R"({"model":"a"})", "", &e));  // none declared: accepted
  CHECK(api::parse_body(R"({"model":"a"})", " Application/JSON ;charset=utf-8", &e));
  CHECK(api::parse_body(R"({"model":"a"})", "application/vnd.api+JSON", &e));
  CHECK(api::parse_body(R"({"model":"a"})", " ; x", &e));  // an empty media type: as none
  for (const char* refused : {"application/jsonx", "xapplication/json", "json", "+jsonx"}) {
    CHECK_FALSE(api::parse_body(R"({"model":"a"})", refused, &e));
    CHECK(e.param == "Content-Type");
  }
  CHECK_FALSE(api::parse_body(R"({"model":"a"})", " TEXT/Plain; charset=x", &e));
  CHECK(e.message == "the request body must be JSON (Content-Type: application/json), not 'text/plain'");

  // duplicates are per object: a closed object's keys leave with it, siblings and nested objects
  // may repeat a key, and a refused body leaves nothing behind
  CHECK_FALSE(api::parse_body(R"({"a":{"b":{"c":1,"c":2}}})", &e));
  CHECK(e.message.find("'c' appears twice") != std::string::npos);
  CHECK(api::parse_body(R"({"c":{"c":{"c":1}},"b":[{"c":1},{"c":2,"d":{"c":3}}],"d":{}})", &e));
  CHECK_FALSE(api::parse_body(R"({"c":{"c":{"c":1}},"b":[{"c":1}],"c":3})", &e));
  CHECK(e.message.find("'c' appears twice") != std::string::npos);
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{\"k" + std::to_string(i) + "\":1}";
  CHECK(api::parse_body(wide + "}", &e));
  CHECK_FALSE(api::parse_body(wide + ",\"k4999\":2}", &e));
  CHECK(e.message.find("'k4999' appears twice") != std::string::npos);
  CHECK(api::parse_body(R"({"k4999":1})", &e));

  CHECK_FALSE(api::parse_body(R"({"model": tru})", &e));
  INFO(e.message);
  CHECK(e.message.starts_with("invalid JSON at byte "));
  CHECK(e.message.find("json.exception") == std::string::npos);
  CHECK(e.message.find("parse_error") == std::string::npos);
  CHECK_FALSE(api::parse_body(R"({"n":1e400})", &e));
  CHECK(e.message.find("json.exception") == std::string::npos);
}

TEST_CASE("body parsing builds json::parse's document; its errors at json::parse's byte") {
  api::validation_error e;
  for (const char* body :
       {R"({"model":"a","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \"q\" \n"}],"n":[]})",
        R"({"i":-9223372036854775808,"u":18446744073709551615,"f":1.5e-300,"z":-0.0,"e":1E2,"b":[true,false,null]})",
        R"([[[],[{}],{"a":[{"b":[1,{"c":{}}]}]}]])", "5", "\"s\"", "null", " { \"a\" : { } , \"b\" : [ 1 , 2 ] } ",
        R"({"a":{"x":1},"b":{"x":{"x":{"x":[{"x":1},{"x":2}]}}}})"}) {
    INFO(body);
    auto got = api::parse_body(body, &e);
    REQUIRE(got);
    const json want = json::parse(body);
    CHECK(*got == want);
    CHECK(got->dump() == want.dump());  // number kinds too (integer, unsigned, float)
  }
  for (const char* bad : {R"({"a":1,})", R"({"a":[1,2)", R"({"a" 1})", "[1] x", "", R"({"a":"\u12"})", "tru",
                          R"({"n":1e400})", R"({"a":01})", "{\"a\":\"\t\"}"}) {
    INFO(bad);
    CHECK_FALSE(api::parse_body(bad, &e));
    try {
      const json parsed = json::parse(bad);
      FAIL("json::parse accepted it: " << parsed.dump());
    } catch (const json::parse_error& pe) {
      CHECK(e.message.starts_with("invalid JSON at byte " + std::to_string(pe.byte) + ": "));
    } catch (const json::exception&) {
      CHECK(e.message.starts_with("invalid JSON: "));
    }
  }
}

TEST_CASE("a tool message must answer an earlier, unanswered assistant tool call (#24 item 10)") {
  json assistant = {{"role", "assistant"},
                    {"content", nullptr},
                    {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", "{}"}}}}}}};
  json user = {{"role", "user"}, {"content", "hi"}};
  auto tool = [](const std::string& id) { return json{{"role", "tool"}, {"tool_call_id", id}, {"content", "12:00"}}; };
  CHECK(run(with(good(), "/messages", json::array({user, assistant, tool("c1")}))).ok);
  auto o = run(with(good(), "/messages", json::array({user, tool("c1")})));
  CHECK_FALSE(o.ok);
  CHECK(o.status == 400);
  CHECK(o.param == "messages[1].tool_call_id");
  o = run(with(good(), "/messages", json::array({user, assistant, tool("c2")})));
  CHECK(o.param == "messages[2].tool_call_id");
  o = run(with(good(), "/messages", json::array({user, assistant, tool("c1"), tool("c1")})));  // answered twice
  CHECK(o.param == "messages[3].tool_call_id");
}

TEST_CASE("json_whitespace: spaced (default) or free; anything else names the field") {
  CHECK(run(with(good(), "/json_whitespace", "free")).ok);
  CHECK(run(with(good(), "/json_whitespace", "spaced")).ok);
  auto o = run(with(good(), "/json_whitespace", "loose"));
  CHECK_FALSE(o.ok);
  CHECK(o.status == 400);
  CHECK(o.param == "json_whitespace");
  CHECK_FALSE(run(with(good(), "/json_whitespace", 1)).ok);
}

TEST_CASE("a model whose chat template matches no family: tool jobs refused with 400 naming it (#25)") {
  struct unknown_catalog : fake_catalog {
    std::vector<api::model_info> list() const override {
      return {{"tiny", "llama", 64, true, "plain"}, {"odd", "llama", 64, true, "unknown"}};
    }
  } cat;
  std::string err;
  net::ssrf_guard guard(*net::parse_cidr_list("127.0.0.0/8", &err));
  api::validation_error e;
  json b = good();
  b["model"] = "odd";
  CHECK_FALSE(api::validate_job(b, cat, guard, {}, &e));
  CHECK(http::status_of(e.kind) == 400);
  CHECK(e.param == "tools");
  CHECK(e.message.find("'odd'") != std::string::npos);
  CHECK(e.message.find("--chat-family") != std::string::npos);
  // Without tools the job runs (rendered as plain text); a known family takes tools.
  CHECK(api::validate_job(without(b, "tools"), cat, guard, {}, &e));
  b["model"] = "tiny";
  CHECK(api::validate_job(b, cat, guard, {}, &e));
}
