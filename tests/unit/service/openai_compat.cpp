// The OpenAI surface's request mapping (Chat Completions, Responses), its refusals (400 naming
// the field), and the stream builders: strictly increasing sequence numbers, deterministic replay
// for starting_after, and tool-call argument deltas that reassemble to the same calls whether a
// client's SSE parser is fed one character at a time or everything at once.
#include <doctest/doctest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "api/job_view.h"
#include "api/model_catalog.h"
#include "api/openai_map.h"
#include "api/openai_stream.h"
#include "net/ssrf_guard.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

// A 64-token "context": one token per 4 characters of message text, as the engine words it.
struct fake_catalog : api::model_catalog {
  std::vector<api::model_info> list() const override { return {{"tiny", "llama", 64, true}}; }
  std::optional<std::string> validate(const std::string&, const turn_request& r) const override {
    size_t n = 0;
    for (const auto& m : r.messages) n += m.content.size() / 4 + 1;
    if (n > 64)
      return "messages: the prompt has " + std::to_string(n) + " tokens, the model's context is 64";
    return std::nullopt;
  }
};

struct fixture {
  fake_catalog cat;
  net::ssrf_guard guard{std::vector<net::cidr>{}};
  api::validation_limits limits;
};

std::optional<api::openai_job> chat(const json& body, api::validation_error* err) {
  fixture f;
  return api::map_chat_request(body, f.cat, f.guard, f.limits, err);
}
std::optional<api::openai_job> responses(const json& body, api::validation_error* err,
                                         const api::response_chain* prev = nullptr) {
  fixture f;
  return api::map_response_request(body, prev, f.cat, f.guard, f.limits, err);
}

std::string refused_param(const json& body, bool is_chat) {
  api::validation_error err;
  auto j = is_chat ? chat(body, &err) : responses(body, &err);
  if (j) return "<accepted>";
  CHECK(int(err.kind) == int(http::error_kind::invalid_request));
  return err.param;
}

const json weather_tool_chat = json::parse(
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})");
const json weather_tool_resp = json::parse(
    R"({"type":"function","name":"get_weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}}}})");

}  // namespace

TEST_CASE("chat completions map onto a high-priority job that ends at client tool calls") {
  api::validation_error err;
  json body = {{"model", "tiny"},
               {"messages", json::array({{{"role", "developer"}, {"content", "be brief"}},
                                         {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "hi "}},
                                                                                     {{"type", "text"}, {"text", "there"}}})}}})},
               {"tools", json::array({weather_tool_chat})},
               {"tool_choice", "auto"},
               {"max_completion_tokens", 100},
               {"stop", "END"},
               {"seed", 7},
               {"n", 1},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"response_format", {{"type", "json_object"}}},
               {"logprobs", false},
               {"temperature", nullptr}};
  auto j = chat(body, &err);
  REQUIRE_MESSAGE(j, err.message);
  CHECK(j->stream);
  CHECK(j->include_usage);
  CHECK(j->spec["priority"] == "high");
  CHECK(j->spec["client_tool_calls"] == "finish");
  CHECK(j->spec["stream_tokens"] == true);
  CHECK(j->spec["messages"][0]["role"] == "system");
  CHECK(j->spec["messages"][1]["content"] == "hi there");
  CHECK(j->spec["stop"] == json::array({"END"}));
  CHECK(j->spec["max_output_tokens"] == 100);
  CHECK(j->spec["max_tokens_per_turn"] == 64);  // clamped to the context
  CHECK(!j->spec.contains("temperature"));      // null = unset
  CHECK(j->spec["openai"]["surface"] == "chat");
}

TEST_CASE("chat completions: every field agentq cannot honour is a 400 naming it") {
  json base = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto with = [&](const char* k, json v) {
    json b = base;
    b[k] = std::move(v);
    return b;
  };
  CHECK(refused_param(base, true) == "<accepted>");
  CHECK(refused_param(with("n", 2), true) == "n");
  CHECK(refused_param(with("logprobs", true), true) == "logprobs");
  CHECK(refused_param(with("top_logprobs", 2), true) == "top_logprobs");
  CHECK(refused_param(with("audio", json::object()), true) == "audio");
  CHECK(refused_param(with("reasoning_effort", "low"), true) == "reasoning_effort");
  CHECK(refused_param(with("logit_bias", {{"50", 1}}), true) == "logit_bias");
  CHECK(refused_param(with("store", true), true) == "store");
  CHECK(refused_param(with("stream_options", {{"include_usage", true}}), true) == "stream_options");
  CHECK(refused_param(with("modalities", json::array({"text", "audio"})), true) == "modalities");
  CHECK(refused_param(with("max_tokens", 0), true) == "max_tokens");
  CHECK(refused_param(with("model", "gpt-4o"), true) == "model");
  json img = base;
  img["messages"][0]["content"] = json::array({{{"type", "image_url"}, {"image_url", {{"url", "http://x"}}}}});
  CHECK(refused_param(img, true) == "messages[0].content[0].type");
  json named = base;
  named["messages"][0]["name"] = "bob";
  CHECK(refused_param(named, true) == "messages[0].name");
  CHECK(refused_param(with("tool_choice", "required"), true) == "tool_choice");  // no tools
}

TEST_CASE("responses: input items, instructions, function tools and text.format map onto a job") {
  api::validation_error err;
  json body = {{"model", "tiny"},
               {"instructions", "answer in JSON"},
               {"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", "weather?"}}})}},
                                      {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}},
                                      {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "rain"}}})},
               {"tools", json::array({weather_tool_resp})},
               {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
               {"text", {{"format", {{"type", "json_schema"}, {"name", "w"}, {"strict", true}, {"schema", {{"type", "object"}}}}}}},
               {"max_output_tokens", 32},
               {"max_tool_calls", 3},
               {"metadata", {{"team", "a"}}},
               {"background", true},
               {"truncation", "auto"},
               {"user", "u1"}};
  auto j = responses(body, &err);
  REQUIRE_MESSAGE(j, err.message);
  CHECK(j->background);
  CHECK(j->spec["priority"] == "normal");
  const json& m = j->spec["messages"];
  REQUIRE(m.size() == 4);
  CHECK(m[0] == json{{"role", "system"}, {"content", "answer in JSON"}});
  CHECK(m[2]["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(m[3]["role"] == "tool");
  CHECK(m[3]["tool_call_id"] == "call_1");
  CHECK(j->spec["tools"][0]["function"]["name"] == "get_weather");
  CHECK(j->spec["tool_choice"]["function"]["name"] == "get_weather");
  CHECK(j->spec["response_format"]["json_schema"]["schema"] == json{{"type", "object"}});
  CHECK(j->spec["max_turns"] == 4);
  CHECK(j->spec["openai"]["input_items"].size() == 3);
  CHECK(j->spec["openai"]["n_instructions"] == 1);
}

TEST_CASE("responses: refusals name the field") {
  json base = {{"model", "tiny"}, {"input", "hi"}};
  auto with = [&](const char* k, json v) {
    json b = base;
    b[k] = std::move(v);
    return b;
  };
  CHECK(refused_param(base, false) == "<accepted>");
  CHECK(refused_param(with("reasoning", {{"effort", "low"}}), false) == "reasoning");
  CHECK(refused_param(with("include", json::array({"reasoning.encrypted_content"})), false) == "include");
  CHECK(refused_param(with("tools", json::array({{{"type", "web_search"}}})), false) == "tools[0].type");
  CHECK(refused_param(with("truncation", "sometimes"), false) == "truncation");
  CHECK(refused_param(with("text", {{"format", {{"type", "grammar"}}}}), false) == "text.format.type");
  CHECK(refused_param(with("previous_response_id", "resp_x"), false) == "previous_response_id");
  json bg = with("background", true);
  bg["store"] = false;
  CHECK(refused_param(bg, false) == "store");
  json img = with("input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}}})}}}));
  CHECK(refused_param(img, false) == "input[0].content[0].type");
  json noinput = {{"model", "tiny"}};
  CHECK(refused_param(noinput, false) == "input");
}

TEST_CASE("responses: truncation disabled says by how much; auto drops the oldest items, never instructions") {
  std::string big(120, 'x');  // ~31 tokens each
  json items = json::array();
  for (int i = 0; i < 3; ++i) items.push_back({{"role", "user"}, {"content", big + std::to_string(i)}});
  json body = {{"model", "tiny"}, {"instructions", "keep me"}, {"input", items}};
  api::validation_error err;
  CHECK(!responses(body, &err));
  CHECK(err.param == "input");
  CHECK(err.message.find("over the model's context of 64 by") != std::string::npos);
  body["truncation"] = "auto";
  auto j = responses(body, &err);
  REQUIRE_MESSAGE(j, err.message);
  const json& m = j->spec["messages"];
  CHECK(m[0]["content"] == "keep me");
  CHECK(m.back()["content"] == big + "2");
  CHECK(j->spec["openai"]["n_truncated"].get<int>() >= 1);
}

TEST_CASE("responses: previous_response_id continues the stored chain") {
  api::response_chain prev{"resp_0123456789abcdef01234567",
                           json::array({{{"role", "user"}, {"content", "weather?"}},
                                        {{"role", "assistant"}, {"content", nullptr},
                                         {"tool_calls", json::array({{{"id", "call_9"}, {"type", "function"},
                                                                      {"function", {{"name", "get_weather"}, {"arguments", "{}"}}}}})}}})};
  json body = {{"model", "tiny"},
               {"previous_response_id", prev.previous_id},
               {"tools", json::array({weather_tool_resp})},
               {"input", json::array({{{"type", "function_call_output"}, {"call_id", "call_9"}, {"output", "sunny"}}})}};
  api::validation_error err;
  auto j = responses(body, &err, &prev);
  REQUIRE_MESSAGE(j, err.message);
  REQUIRE(j->spec["messages"].size() == 3);
  CHECK(j->spec["messages"][2]["role"] == "tool");
  CHECK(j->spec["openai"]["previous_response_id"] == prev.previous_id);
  // an output that answers no call in the chain is refused
  body["input"][0]["call_id"] = "call_nope";
  CHECK(!responses(body, &err, &prev));
}

TEST_CASE("response ids round-trip with job ids") {
  std::string job = "job_0123456789abcdef01234567";
  CHECK(api::response_id_of(job) == "resp_0123456789abcdef01234567");
  CHECK(api::job_id_of_response(api::response_id_of(job)) == job);
  CHECK(!api::job_id_of_response("resp_short"));
  CHECK(!api::job_id_of_response("job_0123456789abcdef01234567"));
}

TEST_CASE("utf8_chunks never splits a character") {
  std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  for (size_t n = 0; n < 8; ++n) {
    std::string joined;
    for (const auto& piece : api::utf8_chunks(s, n)) {
      CHECK(api::is_valid_utf8(piece));
      joined += piece;
    }
    CHECK(joined == s);
  }
}

// --- streams ---------------------------------------------------------------

namespace {

const char* k_args0 = R"({"city": "Zürich", "days": [1, 2, 3], "note": "a \"quoted\" word"})";
const char* k_args1 = R"({"city": "Oslo"})";

struct fake_job {
  std::vector<store::job_event> events;
  std::vector<store::transcript_row> transcript;

  fake_job() {
    auto ev = [&](const char* type, json data) {
      store::job_event e;
      e.id = int64_t(events.size()) + 100;
      e.job_id = "job_0123456789abcdef01234567";
      e.type = type;
      e.data_json = data.dump();
      events.push_back(e);
    };
    json calls = json::array({{{"id", "call_a"}, {"name", "get_weather"}, {"arguments", k_args0}},
                              {{"id", "call_b"}, {"name", "get_weather"}, {"arguments", k_args1}}});
    ev("status", {{"status", "queued"}});
    ev("status", {{"status", "running"}});
    ev("token", {{"text", "Let me "}});
    ev("token", {{"text", "check."}});
    ev("turn", {{"turn", 0}, {"tool_calls", calls}});
    ev("status", {{"status", "completed"}});
    store::transcript_row in;
    in.role = "user";
    in.content = "weather?";
    store::transcript_row t;
    t.turn_idx = 0;
    t.role = "assistant";
    t.content = "Let me check.";
    t.tool_calls_json = calls.dump();
    t.usage_json = R"({"finish":"tool_calls"})";
    transcript = {in, t};
  }

  api::stream_source source(bool chat) const {
    api::stream_source s;
    s.transcript = [this] { return transcript; };
    s.object = [this, chat] {
      store::job_row row;
      row.id = "job_0123456789abcdef01234567";
      row.status = store::job_status::completed;
      row.request_json = R"({"model":"tiny","openai":{"surface":"responses"}})";
      return chat ? api::chat_completion_object(row, transcript) : api::response_object(row, transcript);
    };
    return s;
  }
};

// A client's SSE decoder, fed arbitrary pieces: complete events' data payloads in order.
struct sse_decoder {
  std::string buf;
  std::vector<std::string> data;
  void feed(std::string_view piece) {
    buf += piece;
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
      std::string frame = buf.substr(0, end);
      buf.erase(0, end + 2);
      std::string payload;
      size_t at = 0;
      while (at <= frame.size()) {
        size_t nl = frame.find('\n', at);
        std::string line = frame.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        if (line.starts_with("data: ")) payload += line.substr(6);
        if (nl == std::string::npos) break;
        at = nl + 1;
      }
      if (!payload.empty()) data.push_back(payload);
    }
  }
};

// Reassemble function calls from Responses events: item id -> (name, arguments).
std::map<std::string, std::pair<std::string, std::string>> calls_from_responses(const std::vector<std::string>& data) {
  std::map<std::string, std::pair<std::string, std::string>> calls;
  for (const auto& d : data) {
    json e = json::parse(d);
    if (e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call")
      calls[e["item"]["id"]] = {e["item"]["name"], ""};
    if (e["type"] == "response.function_call_arguments.delta") calls[e["item_id"]].second += e["delta"].get<std::string>();
    if (e["type"] == "response.function_call_arguments.done") CHECK(calls[e["item_id"]].second == e["arguments"]);
  }
  return calls;
}

// Reassemble chat tool calls from chunks: index -> (name, arguments).
std::map<int, std::pair<std::string, std::string>> calls_from_chat(const std::vector<std::string>& data) {
  std::map<int, std::pair<std::string, std::string>> calls;
  for (const auto& d : data) {
    if (d == "[DONE]") continue;
    json c = json::parse(d);
    if (c["choices"].empty()) continue;
    const json& delta = c["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    for (const auto& tc : delta["tool_calls"]) {
      auto& call = calls[tc["index"].get<int>()];
      if (tc["function"].contains("name")) call.first = tc["function"]["name"];
      call.second += tc["function"].value("arguments", "");
    }
  }
  return calls;
}

std::string responses_sse(const fake_job& job, size_t args_chunk, int64_t starting_after = -1) {
  api::response_stream_builder b("resp_0123456789abcdef01234567", job.source(false), args_chunk);
  std::string out;
  for (const auto& e : job.events)
    for (const auto& ev : b.feed(e))
      if (ev["sequence_number"].get<int64_t>() > starting_after) out += api::responses_sse_frame(ev);
  CHECK(b.done());
  return out;
}

}  // namespace

TEST_CASE("responses stream: event order and strictly increasing sequence numbers") {
  fake_job job;
  sse_decoder d;
  d.feed(responses_sse(job, 5));
  std::vector<std::string> types;
  int64_t last = -1;
  for (const auto& s : d.data) {
    json e = json::parse(s);
    CHECK(e["sequence_number"].get<int64_t>() == last + 1);
    last = e["sequence_number"];
    types.push_back(e["type"]);
  }
  REQUIRE(types.size() > 8);
  CHECK(types[0] == "response.created");
  CHECK(types[1] == "response.in_progress");
  CHECK(types[2] == "response.output_item.added");
  CHECK(types[3] == "response.content_part.added");
  CHECK(types[4] == "response.output_text.delta");
  CHECK(types.back() == "response.completed");
  json final_event = json::parse(d.data.back());
  CHECK(final_event["response"]["output"].size() == 3);  // message + two function calls
  CHECK(final_event["response"]["output_text"] == "Let me check.");
}

TEST_CASE("tool-call argument deltas reassemble to the same calls at any chunking") {
  fake_job job;
  std::map<std::string, std::pair<std::string, std::string>> reference;
  for (size_t chunk : {size_t(0), size_t(1), size_t(3), size_t(16)}) {
    std::string text = responses_sse(job, chunk);
    sse_decoder whole, by_char;
    whole.feed(text);
    for (char c : text) by_char.feed(std::string_view(&c, 1));
    CHECK(whole.data == by_char.data);
    auto calls = calls_from_responses(by_char.data);
    REQUIRE(calls.size() == 2);
    CHECK(calls["fc_a"].second == k_args0);
    CHECK(calls["fc_b"].second == k_args1);
    if (reference.empty()) reference = calls;
    CHECK(calls == reference);
  }
  // chat chunks: the same calls by index
  for (size_t chunk : {size_t(0), size_t(1), size_t(7)}) {
    api::chat_stream_builder b("chatcmpl-x", "tiny", 0, true, job.source(true), chunk);
    std::string text;
    for (const auto& e : job.events)
      for (const auto& p : b.feed(e)) text += api::chat_sse_frame(p);
    sse_decoder by_char;
    for (char c : text) by_char.feed(std::string_view(&c, 1));
    auto calls = calls_from_chat(by_char.data);
    REQUIRE(calls.size() == 2);
    CHECK(calls[0] == std::make_pair(std::string("get_weather"), std::string(k_args0)));
    CHECK(calls[1].second == k_args1);
    CHECK(by_char.data.back() == "[DONE]");
    json usage = json::parse(by_char.data[by_char.data.size() - 2]);
    CHECK(usage["choices"].empty());
    CHECK(usage["usage"].is_object());
    json fin = json::parse(by_char.data[by_char.data.size() - 3]);
    CHECK(fin["choices"][0]["finish_reason"] == "tool_calls");
  }
}

TEST_CASE("a resumed stream (starting_after) is the suffix of the full one") {
  fake_job job;
  sse_decoder full, resumed;
  full.feed(responses_sse(job, 4));
  resumed.feed(responses_sse(job, 4, 6));
  REQUIRE(full.data.size() > 7);
  std::vector<std::string> suffix(full.data.begin() + 7, full.data.end());
  CHECK(resumed.data == suffix);
}

TEST_CASE("Predicted Outputs: prediction maps onto the job spec; wrong shapes name the field (#32)") {
  json base = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  json rbase = {{"model", "tiny"}, {"input", "hi"}};
  auto with = [](json b, json v) {
    b["prediction"] = std::move(v);
    return b;
  };
  for (bool is_chat : {true, false}) {
    const json& b = is_chat ? base : rbase;
    api::validation_error err;
    json pred = {{"type", "content"}, {"content", "the file, as it was"}};
    auto j = is_chat ? chat(with(b, pred), &err) : responses(with(b, pred), &err);
    REQUIRE_MESSAGE(j, err.message);
    CHECK(j->spec["prediction"] == pred);
    json parts = {{"type", "content"}, {"content", json::array({{{"type", "text"}, {"text", "a"}}})}};
    CHECK(refused_param(with(b, parts), is_chat) == "<accepted>");
    CHECK(refused_param(with(b, nullptr), is_chat) == "<accepted>");  // null = unset
    CHECK(refused_param(with(b, "text"), is_chat) == "prediction");
    CHECK(refused_param(with(b, {{"type", "file"}, {"content", "x"}}), is_chat) == "prediction.type");
    CHECK(refused_param(with(b, {{"type", "content"}}), is_chat) == "prediction.content");
    CHECK(refused_param(with(b, {{"type", "content"}, {"content", 7}}), is_chat) == "prediction.content");
    CHECK(refused_param(with(b, {{"type", "content"}, {"content", "x"}, {"extra", 1}}), is_chat) == "prediction.extra");
    CHECK(refused_param(with(b, {{"type", "content"}, {"content", json::array({{{"type", "image"}}})}}), is_chat) ==
          "prediction.content[0].type");
  }
}

TEST_CASE("speculation counters: job usage -> chat usage.completion_tokens_details, responses output_tokens_details (#32)") {
  store::job_row row;
  row.id = "job_0123456789abcdef01234567";
  row.status = store::job_status::completed;
  row.request_json = R"({"model":"tiny","openai":{"surface":"responses"}})";
  store::usage_totals u;
  u.prompt_tokens = 10;
  u.completion_tokens = 40;
  u.accepted_prediction_tokens = 25;
  u.rejected_prediction_tokens = 6;
  u.turns = 2;
  row.usage_json = u.to_json();
  CHECK(store::usage_totals::from_json(row.usage_json).accepted_prediction_tokens == 25);
  CHECK(store::usage_totals::from_json(row.usage_json).rejected_prediction_tokens == 6);
  store::transcript_row t;
  t.turn_idx = 1;
  t.role = "assistant";
  t.content = "done";
  const json c = api::chat_completion_object(row, {t});
  CHECK(c["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 25);
  CHECK(c["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] == 6);
  CHECK(c["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0);
  const json r = api::response_object(row, {t});
  CHECK(r["usage"]["output_tokens_details"]["accepted_prediction_tokens"] == 25);
  CHECK(r["usage"]["output_tokens_details"]["rejected_prediction_tokens"] == 6);
  const json job = api::job_object(row, nullptr);
  CHECK(job["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 25);
  // an older row without the details reads as zeros
  row.usage_json = R"({"prompt_tokens":3,"completion_tokens":4,"turns":1})";
  CHECK(api::job_object(row, nullptr)["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] == 0);
}

TEST_CASE("job_object: a request handed in parsed gives the object parsing request_json gives") {
  // The submit's 202 passes the body it parsed (api.cpp submit_answer); every other route parses
  // the stored text. Same bytes either way, webhook secret left out in both.
  store::job_row row;
  row.id = "job_0123456789ab0123456789ab";
  row.status = store::job_status::queued;
  row.priority = store::job_priority::high;
  row.created_ms = 1764000000123;
  row.deadline_ms = 1764000060123;
  row.request_json = json::parse(R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],
    "metadata":{"team":"a","n":"2"},"webhook":{"url":"http://127.0.0.1:9/h","secret":"whsec_x","events":["job.completed"]},
    "max_tokens_per_turn":1.5})").dump();
  const json parsed = json::parse(row.request_json);
  const std::string from_text = api::job_object(row, nullptr).dump();
  CHECK(api::job_object(row, nullptr, &parsed).dump() == from_text);
  CHECK(from_text.find("whsec_x") == std::string::npos);
  CHECK(from_text.find("\"team\":\"a\"") != std::string::npos);
  row.request_json = R"({"model":"tiny","messages":[]})";  // no metadata, no webhook
  const json bare = json::parse(row.request_json);
  CHECK(api::job_object(row, nullptr, &bare).dump() == api::job_object(row, nullptr).dump());
}

// request_model (a batch output line's "model") reads what the whole parse read: the top-level
// "model" string of a stored request, and "" where the parse found none; keys named "model" deeper
// (a tool's parameters, metadata) are not it.
TEST_CASE("request_model: the top-level model of a stored request, as the parsed object holds it") {
  auto parsed = [](const std::string& text) -> std::string {
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return "";
    auto m = j.find("model");
    return m != j.end() && m->is_string() ? m->get<std::string>() : "";
  };
  std::vector<std::string> texts = {
      json{{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hi \u00e9 \"q\""}}})}}.dump(),
      json{{"messages", json::array({{{"model", "not-me"}}})}, {"model", "stories260K"}, {"tools", json::array()}}.dump(),
      json{{"metadata", {{"model", "deep"}}}, {"model", "m\u0001x"}, {"openai", {{"surface", "chat"}}}}.dump(),
      json{{"a", json::array({json::array({1, 2}), json::object({{"model", "x"}})})}, {"model", ""}}.dump(),
      json{{"messages", json::array()}}.dump(),          // no model
      json{{"model", 5}}.dump(),                         // not a string
      json{{"model", json::object({{"model", "x"}})}}.dump(),
      json{{"model", nullptr}, {"z", "y"}}.dump(),
      "[\"model\", \"x\"]",                              // not an object
      "",
      "{\"model\":\"esc\\u0041ped\",\"x\":1}",
      "{\"x\":[{\"model\":\"deep\"}],\"model\":\"top\"}",
  };
  for (const auto& t : texts) {
    CAPTURE(t);
    CHECK(api::request_model(t) == parsed(t));
  }
  CHECK(api::request_model("{\"model\":\"esc\\u0041ped\"}") == "escAped");
  // NOTE: stored requests always parse; on broken text it keeps what it read before the break.
  CHECK(api::request_model("{\"model\":\"m\",") == "m");
  CHECK(api::request_model("{\"x\":") == "");
}
