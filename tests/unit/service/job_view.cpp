// job_json (api/job_view.h) against job_object(...).dump(): the job object the 202 and
// GET /v1/jobs/{id} send, written directly, must be the same bytes for every shape of row.
// Also: the 202's text is made with one allocation (counts every operator new in this binary).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <random>

#include "api/job_view.h"

#include "count_new.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

// The object form, from the whole stored request when none is handed in (as the API once read it:
// parsed whole, {} when it does not parse); job_object and job_json read only its top-level fields.
std::string reference(const store::job_row& job, const std::vector<store::transcript_row>* t,
                      const json* request = nullptr) {
  json whole = job.request_json.empty() ? json::object() : json::parse(job.request_json, nullptr, false);
  if (whole.is_discarded()) whole = json::object();
  return api::job_object(job, t, request ? request : &whole).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Both forms: request_json parsed by the writer, and the parsed body handed in (the 202).
void check_same(const store::job_row& job, const std::vector<store::transcript_row>* t = nullptr) {
  CHECK(api::job_json(job, t) == reference(job, t));
  json req = json::parse(job.request_json, nullptr, false);
  if (!req.is_discarded() && !job.request_json.empty()) CHECK(api::job_json(job, t, &req) == reference(job, t, &req));
}

store::job_row base_job() {
  store::job_row j;
  j.id = "job_0190a1b2c3d4e5f60718293a";
  j.tenant = "t1";
  j.request_json = R"({"model":"stories260K","messages":[{"role":"user","content":"Once upon a time 7"}],)"
                   R"("max_turns":1,"max_tokens_per_turn":1})";
  j.created_ms = 1764840000123;
  return j;
}

// Strings that exercise the escaping: quotes, backslashes, every control character, DEL,
// 2-4 byte UTF-8, and invalid UTF-8 (cut sequences, overlongs, surrogates, stray bytes).
std::vector<std::string> tricky_strings() {
  std::vector<std::string> out = {"", "plain", "quote \" and \\ back", "tab\there\nnew\rcr\fff\bbs",
                                  "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "\x7F del", "slash / stays",
                                  "cut \xE2\x82", "overlong \xC0\xAF", "surrogate \xED\xA0\x80", "stray \x80\xBF end",
                                  "\xF4\x90\x80\x80 over max", "\xFF\xFE", std::string("nul \0 inside", 13)};
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += char(c);
  out.push_back(controls);
  return out;
}

}  // namespace

TEST_CASE("job_json: a submit's 202 and a finished 1-token job") {
  store::job_row j = base_job();
  check_same(j);
  j.status = store::job_status::incomplete;
  j.started_ms = 1764840000125;
  j.finished_ms = 1764840000131;
  j.result_json = R"({"content":" Tim","message":{"role":"assistant","content":" Tim"},"finish_reason":"length"})";
  j.usage_json = R"({"prompt_tokens":11,"cached_tokens":0,"computed_tokens":11,"completion_tokens":1,"turns":1,)"
                 R"("completion_tokens_details":{"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}})";
  std::vector<store::transcript_row> t(2);
  t[0].seq = 0, t[0].role = "user", t[0].content = "Once upon a time 7", t[0].created_ms = j.created_ms;
  t[1].seq = 1, t[1].turn_idx = 0, t[1].role = "assistant", t[1].content = " Tim";
  t[1].usage_json = R"({"prompt_tokens":11,"completion_tokens":1,"queue_ms":2,"prefill_ms":0.4,"decode_ms":0,)"
                    R"("finish":"length"})";
  t[1].created_ms = 1764840000131;
  check_same(j);
  check_same(j, &t);
  std::vector<store::transcript_row> none;
  check_same(j, &none);
}

TEST_CASE("job_json: every status, timing and field shape") {
  store::job_row j = base_job();
  j.request_json = R"({"model":"m","messages":[],"metadata":{"team":"a\"b","z":"\u00e9\u20ac","a":"\n"},)"
                   R"("webhook":{"url":"http://127.0.0.1:9/h","events":["job.completed"],"secret":"whsec_x"}})";
  for (auto st : {store::job_status::queued, store::job_status::running, store::job_status::requires_action,
                  store::job_status::completed, store::job_status::failed, store::job_status::cancelled,
                  store::job_status::incomplete})
    for (auto pr : {store::job_priority::high, store::job_priority::normal, store::job_priority::low,
                    store::job_priority::batch}) {
      j.status = st;
      j.priority = pr;
      check_same(j);
    }
  j.status = store::job_status::requires_action;
  for (const char* pending : {"", "[]", R"([{"id":"c1","name":"f","arguments":"{\"a\":1}"}])", "not json", "{}"}) {
    j.pending_json = pending;
    check_same(j);
  }
  // timestamps: none, small, large, before the epoch (a clock that went wrong) and every mix
  for (int64_t c : {int64_t(0), int64_t(1), int64_t(999), int64_t(1764840000000), int64_t(-5)})
    for (int64_t s : {int64_t(0), c + 1, int64_t(1764840000001)})
      for (int64_t f : {int64_t(0), s + 7, int64_t(17)}) {
        j.created_ms = c, j.started_ms = s, j.finished_ms = f, j.deadline_ms = f ? f + 1000 : 0;
        check_same(j);
      }
  // webhook shapes: no events, no url, not an object; metadata absent, not an object, nested
  for (const char* req : {R"({"model":"m","webhook":{"url":"http://h/"}})", R"({"model":"m","webhook":{}})",
                          R"({"model":"m","webhook":"http://h/"})", R"({"model":"m","webhook":{"events":null}})",
                          R"({"model":"m","metadata":[1,2.5,-0.0,1e300,true,null]})",
                          R"({"model":"m","metadata":{"k":{"n":[{"x":1}]}}})", R"({})", R"({"messages":[]})"}) {
    j.request_json = req;
    check_same(j);
  }
  // a request that is not an object or not JSON (rows of older versions): job_object's outcome
  j.request_json = "not json";
  check_same(j);
  j.request_json = "";
  check_same(j);
  j.request_json = R"({"model":7})";
  CHECK_THROWS(reference(j, nullptr));
  CHECK_THROWS(api::job_json(j, nullptr));
  j.request_json = "[1]";
  CHECK_THROWS(reference(j, nullptr));
  CHECK_THROWS(api::job_json(j, nullptr));
}

TEST_CASE("job_json: usage and output of every shape") {
  store::job_row j = base_job();
  j.status = store::job_status::completed;
  for (const char* usage :
       {"", "not json", "[1,2]", "{}", R"({"n_tokens_prompt":3,"n_tokens_cached":1,"n_tokens_generated":2,"turns":4})",
        R"({"prompt_tokens":2.9,"n_tokens_prompt":5,"completion_tokens":true,"turns":2.7})",
        R"({"prompt_tokens":"x","cached_tokens":-4,"completion_tokens":9223372036854775807,"turns":true})",
        R"({"completion_tokens_details":[1],"turns":0})",
        R"({"completion_tokens_details":{"accepted_prediction_tokens":3,"rejected_prediction_tokens":1.5}})",
        R"({"prompt_tokens":18446744073709551615,"turns":-1})",
        // the last of a repeated key; a nested object's keys are not the top level's; escapes in keys
        R"({"prompt_tokens":1,"prompt_tokens":"x","n_tokens_prompt":4,"turns":1,"turns":3})",
        R"({"x":{"prompt_tokens":9,"completion_tokens_details":{"accepted_prediction_tokens":5}},"y":[{"turns":"z"}]})",
        R"({"completion_tokens_details":{"accepted_prediction_tokens":2},"completion_tokens_details":7})",
        R"({"completion_tokens_details":{"accepted_prediction_tokens":2},"completion_tokens_details":{"rejected_prediction_tokens":1}})",
        R"({"completion_tokens_details":{"accepted_prediction_tokens":{"a":1},"rejected_prediction_tokens":[2]}})",
        R"({"prompt_tokens":6,"cached_tokens":[1],"completion_tokens":{"n":2},"turns":false})",
        R"([{"prompt_tokens":3}])", "17", R"({"prompt_tokens":3})" " trailing", R"({"prompt_tokens":1e400})"}) {
    j.usage_json = usage;
    check_same(j);
  }
  j.usage_json = R"({"turns":"two"})";  // value("turns", 0) throws on a string, in both
  CHECK_THROWS(reference(j, nullptr));
  CHECK_THROWS(api::job_json(j, nullptr));
  j.usage_json = "";
  for (const char* result : {"", "{}", R"({"b":1,"a":[1.0,2.25,1e-7,-3]})", "plain text answer", "\"quoted\"",
                             "12", "{\"content\":\"caf\xC3\xA9\"}", "bad \xC3 utf8", "{\"content\":\"x\xFFy\"}"}) {
    j.result_json = result;
    check_same(j);
  }
}

TEST_CASE("job_json: transcripts with tools, turns and odd usage") {
  store::job_row j = base_job();
  j.status = store::job_status::requires_action;
  j.pending_json = R"([{"id":"c2","name":"get_time","arguments":"{}"}])";
  std::vector<store::transcript_row> t;
  auto row = [&](const char* role, int32_t turn, std::string content) {
    store::transcript_row r;
    r.seq = int64_t(t.size());
    r.turn_idx = turn;
    r.role = role;
    r.content = std::move(content);
    r.created_ms = 1764840000200 + r.seq;
    t.push_back(r);
    return &t.back();
  };
  row("system", -1, "be brief");
  row("user", -1, "what time is it?");
  auto* a = row("assistant", 0, "");
  a->tool_calls_json = R"([{"id":"c1","name":"get_time","arguments":"{}"}])";
  a->usage_json = R"({"prompt_tokens":30,"completion_tokens":12,"queue_ms":1,"prefill_ms":2.5,"decode_ms":3})";
  auto* tool = row("tool", -1, "12:00");
  tool->tool_call_id = "c1";
  tool->name = "get_time";
  auto* b = row("assistant", 1, "It is noon.");
  b->usage_json = R"({"finish":"stop","decode_ms":null,"queue_ms":"soon"})";
  auto* c = row("assistant", 2, "again");
  c->tool_calls_json = "[]";
  c->usage_json = "not json";
  auto* e = row("assistant", 4, "y");
  e->usage_json = R"({"finish":"length","finish":null,"queue_ms":18446744073709551615,"prefill_ms":-3,)"
                  R"("decode_ms":"1 ms","decode_ms":true,"prompt_tokens":2})";
  auto* f = row("assistant", 5, "z");
  f->usage_json = R"({"queue_ms":1e-7,"prefill_ms":1234567.0,"decode_ms":"café "q"","finish":"stöp"})";
  auto* d = row("assistant", 3, "x");
  d->tool_calls_json = "not json either";
  d->usage_json = R"({"finish":7,"prefill_ms":{"a":[1]}})";
  d->created_ms = 0;
  row("assistant", -1, "an input assistant message: no turn");
  check_same(j, &t);
  // a turn's usage that job_object copies whole or throws on: the old way, same outcome
  t.back().turn_idx = 6;
  t.back().usage_json = R"({"queue_ms":{"a":[1]},"decode_ms":[1,2]})";
  check_same(j, &t);
  t.back().usage_json = R"({"turns":1,"prefill_ms":[]})";
  check_same(j, &t);
  t.back().usage_json = R"({"completion_tokens_details":[],"finish":{"x":1}})";
  check_same(j, &t);
}

TEST_CASE("job_json: random strings in every string field") {
  // Bytes drawn mostly from the ones escaping cares about, so each string mixes them.
  const std::string alphabet = std::string("aZ09 \"\\/\b\f\n\r\t\x01\x1f\x7f", 16) + "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x80\xC0\xED\xFF";
  std::mt19937 rng(29);
  auto random_string = [&] {
    std::string s;
    for (int n = int(rng() % 24); n > 0; --n) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (const auto& s : tricky_strings()) {
    store::job_row j = base_job();
    j.error = s;
    j.id = s;
    j.request_json = json{{"model", s}, {"metadata", {{"k", s}}}, {"webhook", {{"url", s}}}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
    std::vector<store::transcript_row> t(1);
    t[0].role = "assistant", t[0].turn_idx = 0, t[0].content = s, t[0].name = s, t[0].tool_call_id = s;
    t[0].usage_json = json{{"finish", "stop"}}.dump();
    check_same(j, &t);
  }
  for (int i = 0; i < 500; ++i) {
    store::job_row j = base_job();
    j.error = random_string();
    j.result_json = random_string();
    j.created_ms = int64_t(rng()) * int64_t(rng() % 1000);
    j.started_ms = j.created_ms + rng() % 5000;
    std::vector<store::transcript_row> t(2);
    t[0].role = "user", t[0].content = random_string();
    t[1].role = "assistant", t[1].turn_idx = 0, t[1].content = random_string();
    t[1].created_ms = int64_t(rng()) * 1000 + rng() % 1000;
    INFO("round " << i);
    check_same(j, &t);
  }
}

TEST_CASE("job_json: the 202 is one allocation (the text), the object form many") {
  store::job_row j = base_job();
  const json req = json::parse(j.request_json);
  long before = test::n_new();
  std::string text = api::job_json(j, nullptr, &req);
  const long n_direct = test::n_new() - before;
  before = test::n_new();
  std::string ref = reference(j, nullptr, &req);
  const long n_object = test::n_new() - before;
  CHECK(text == ref);
  CHECK(n_direct == 1);
  CHECK(n_object > 10);  // what the 202 cost before (the object's nodes and strings)
  MESSAGE("allocations for the 202's text: job_json " << n_direct << ", job_object + dump " << n_object);
}

TEST_CASE("job_json: a stored request is read for model, metadata and webhook only, as the whole parse reads them") {
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "model"}, {"parameters", {{"type", "object"}}}}}}});
  const std::vector<std::string> requests = {
      // the keys a job object shows, beside messages and tools that hold the same names deeper down
      json{{"messages", {{{"role", "user"}, {"content", "hi"}, {"model", "inner"}}}},
           {"tools", tools},
           {"model", "stories260K"},
           {"metadata", {{"model", "m"}, {"webhook", {{"url", "x"}}}, {"n", 1}}},
           {"webhook", {{"url", "https://example.com/h"}, {"events", {"job.completed"}}}},
           {"max_turns", 3}}
          .dump(),
      // a repeated key: the last one, as the parsed object keeps it
      R"({"model":"first","messages":[],"model":"second","metadata":{"a":1},"metadata":{"b":2}})",
      // shapes a job object copies or falls back on
      R"({"model":"m","metadata":null,"webhook":"not an object"})",
      R"({"model":"m","metadata":[1,2],"webhook":{"url":"u","events":"job.completed"}})",
      R"({"messages":[{"role":"user","content":"no model"}]})",
      R"({"model":"m","messages":[{"role":"user","content":"cut)",  // does not parse: {}
      "not json at all",
      "",
      R"({"model":"caf\u00e9 \ud83d\ude00","metadata":{"k":"\u0000"}})",
  };
  for (const auto& r : requests) {
    store::job_row j = base_job();
    j.request_json = r;
    INFO(r);
    check_same(j);
  }
  // A large request: its messages are not built into a document.
  store::job_row j = base_job();
  json big = json::parse(j.request_json);
  for (int i = 0; i < 200; ++i) big["messages"].push_back({{"role", "user"}, {"content", "message " + std::to_string(i)}});
  j.request_json = big.dump();
  long before = test::n_new();
  std::string text = api::job_json(j, nullptr);
  const long n_fields = test::n_new() - before;
  before = test::n_new();
  const json whole = json::parse(j.request_json);
  const long n_whole = test::n_new() - before;
  std::string ref = reference(j, nullptr);
  CHECK(text == ref);
  CHECK(api::job_object(j, nullptr).dump(-1, ' ', false, json::error_handler_t::replace) == ref);  // a list's
  // NOTE: not none: the parser still makes a JSON string of every key it is asked about (2 a message)
  CHECK(n_fields * 2 < n_whole);
  MESSAGE("allocations for GET's job object of a 200-message request: job_json " << n_fields
                                                                                   << "; the request's whole parse alone "
                                                                                   << n_whole);
}

TEST_CASE("request_fields: the whole parse's top-level values under the keys asked for, nothing else") {
  const std::vector<std::string> texts = {
      R"({"model":"m","openai":{"surface":"responses","input_items":[{"id":"a","content":[{"text":"x"}]}]},)"
      R"("messages":[{"role":"user","content":"hi","openai":"inner"}],"metadata":{"k":"v"}})",
      R"({"openai":1,"openai":{"n_instructions":2},"model":["not","a","string"]})",
      R"({"messages":[],"tools":[{"type":"function","function":{"name":"openai"}}]})",
      R"([{"openai":{}}])",  // a top level that is no object: kept whole
      R"("text")",
      R"({"openai":{"cut":)",  // does not parse
      "",
  };
  const std::vector<std::vector<std::string>> key_sets = {{"openai"}, {"openai", "model", "metadata"}, {"nothing"}};
  for (const auto& text : texts) {
    json whole = text.empty() ? json::object() : json::parse(text, nullptr, false);
    if (whole.is_discarded()) whole = json::object();
    for (const auto& keys : key_sets) {
      json want = whole;
      if (want.is_object())
        for (auto it = want.begin(); it != want.end();)
          it = std::find(keys.begin(), keys.end(), it.key()) == keys.end() ? want.erase(it) : std::next(it);
      json got = keys.size() == 1 ? api::request_fields(text, {keys[0]})
                                  : api::request_fields(text, {keys[0], keys[1], keys[2]});
      INFO(text << " / " << keys.size() << " keys");
      CHECK(got == want);
    }
  }
}
