// POST /v1/jobs validation: each check names the field it rejects (see validate.h).
#include "api/validate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "api/model_catalog.h"
#include "net/ssrf_guard.h"
#include "util/json_depth.h"
#include "webhooks/signing.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {

// Thrown inside validation, caught once in validate_job (parser-style).
struct invalid {
  validation_error e;
};

[[noreturn]] void fail(std::string param, std::string message,
                       http::error_kind kind = http::error_kind::invalid_request) {
  throw invalid{{kind, std::move(message), std::move(param)}};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

const json& need(const json& obj, const char* key, const std::string& param) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(param, "missing required field '" + param + "'");
  return *it;
}

std::string get_string(const json& v, const std::string& param, bool allow_empty = true) {
  if (!v.is_string()) fail(param, "'" + param + "' must be a string, not " + type_name(v));
  if (!allow_empty && v.get_ref<const std::string&>().empty()) fail(param, "'" + param + "' must not be empty");
  return v.get<std::string>();
}

double get_number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) fail(param, "'" + param + "' must be a number, not " + type_name(v));
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    fail(param, "'" + param + "' must be between " + json(lo).dump() + " and " + json(hi).dump());
  return d;
}

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) fail(param, "'" + param + "' must be an integer, not " + type_name(v));
  int64_t i = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(INT64_MAX)))
                                     : v.get<int64_t>();
  if (i < lo || i > hi)
    fail(param, "'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) fail(param, "'" + param + "' must be a boolean, not " + type_name(v));
  return v.get<bool>();
}

// NOTE: keys as string_views: a literal's length is known at compile time, so most candidates are
// ruled out by size alone (with const char*, every comparison ran strlen and memcmp: ~a quarter of a
// Batch line's mapping, issue 29).
void only_keys(const json& obj, const std::string& param, std::initializer_list<std::string_view> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string_view key = it.key();
    bool known = false;
    for (std::string_view k : keys) known = known || key == k;
    if (!known) {
      std::string p = param.empty() ? it.key() : param + "." + it.key();
      fail(p, "unknown field '" + p + "'");
    }
  }
}

void check_url(const net::ssrf_guard& guard, const json& v, const std::string& param) {
  std::string url = get_string(v, param, false);
  std::string why;
  if (!guard.check(url, &why)) fail(param, "'" + param + "' is not an allowed URL: " + why);
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// A JSON Schema must be an object (or boolean); deeper checks are the engine's (schema compile).
void check_schema_shape(const json& v, const std::string& param) {
  if (!v.is_object() && !v.is_boolean()) fail(param, "'" + param + "' must be a JSON Schema object");
  if (v.is_object()) {
    if (auto t = v.find("type"); t != v.end() && !t->is_string() && !t->is_array())
      fail(param + ".type", "'" + param + ".type' must be a string or an array of strings");
    if (auto p = v.find("properties"); p != v.end() && !p->is_object())
      fail(param + ".properties", "'" + param + ".properties' must be an object");
    if (auto r = v.find("required"); r != v.end() && !r->is_array())
      fail(param + ".required", "'" + param + ".required' must be an array");
  }
}

chat_message parse_message(const json& m, const std::string& p) {
  if (!m.is_object()) fail(p, "'" + p + "' must be an object");
  only_keys(m, p, {"role", "content", "tool_calls", "tool_call_id", "name"});
  chat_message out;
  std::string r = get_string(need(m, "role", p + ".role"), p + ".role");
  if (r == "system") out.role = role::system;
  else if (r == "user") out.role = role::user;
  else if (r == "assistant") out.role = role::assistant;
  else if (r == "tool") out.role = role::tool;
  else fail(p + ".role", "'" + p + ".role' must be one of system, user, assistant, tool");
  auto c = m.find("content");
  if (c != m.end() && !c->is_null()) out.content = get_string(*c, p + ".content");
  else if (out.role != role::assistant) fail(p + ".content", "missing required field '" + p + ".content'");
  if (auto tc = m.find("tool_calls"); tc != m.end()) {
    if (out.role != role::assistant) fail(p + ".tool_calls", "only assistant messages carry tool_calls");
    if (!tc->is_array()) fail(p + ".tool_calls", "'" + p + ".tool_calls' must be an array");
    for (size_t i = 0; i < tc->size(); ++i) {
      std::string q = p + ".tool_calls[" + std::to_string(i) + "]";
      const json& call = (*tc)[i];
      if (!call.is_object()) fail(q, "'" + q + "' must be an object");
      tool_call t;
      t.id = get_string(need(call, "id", q + ".id"), q + ".id", false);
      const json& fn = need(call, "function", q + ".function");
      if (!fn.is_object()) fail(q + ".function", "'" + q + ".function' must be an object");
      t.name = get_string(need(fn, "name", q + ".function.name"), q + ".function.name", false);
      const json& args = need(fn, "arguments", q + ".function.arguments");
      if (args.is_string()) {
        // NOTE: the depth cap keeps later dumps of these arguments off deep recursion
        auto parsed = util::json_depth(args.get_ref<const std::string&>()) > util::k_max_json_depth
                          ? json(json::value_t::discarded)
                          : json::parse(args.get<std::string>(), nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object())
          fail(q + ".function.arguments", "'" + q + ".function.arguments' must be a JSON object encoded as a string");
        t.arguments_json = args.get<std::string>();
      } else if (args.is_object()) {
        t.arguments_json = args.dump();
      } else {
        fail(q + ".function.arguments", "'" + q + ".function.arguments' must be a string");
      }
      out.tool_calls.push_back(std::move(t));
    }
  }
  if (out.role == role::assistant && out.content.empty() && out.tool_calls.empty() && c == m.end())
    fail(p + ".content", "assistant messages need content or tool_calls");
  if (out.role == role::tool) {
    out.tool_call_id = get_string(need(m, "tool_call_id", p + ".tool_call_id"), p + ".tool_call_id", false);
    if (auto n = m.find("name"); n != m.end()) out.name = get_string(*n, p + ".name");
  } else if (m.contains("tool_call_id")) {
    fail(p + ".tool_call_id", "only tool messages carry tool_call_id");
  }
  return out;
}

tool_def parse_tool(const json& t, const std::string& p, const net::ssrf_guard& guard,
                    const validation_limits& limits) {
  if (!t.is_object()) fail(p, "'" + p + "' must be an object");
  if (t.dump().size() > limits.max_tool_bytes)
    fail(p, "'" + p + "' is larger than " + std::to_string(limits.max_tool_bytes) + " bytes");
  only_keys(t, p, {"type", "function", "execution"});
  if (get_string(need(t, "type", p + ".type"), p + ".type") != "function")
    fail(p + ".type", "'" + p + ".type' must be \"function\"");
  const json& fn = need(t, "function", p + ".function");
  if (!fn.is_object()) fail(p + ".function", "'" + p + ".function' must be an object");
  only_keys(fn, p + ".function", {"name", "description", "parameters", "strict"});
  tool_def d;
  d.name = get_string(need(fn, "name", p + ".function.name"), p + ".function.name", false);
  if (!valid_tool_name(d.name))
    fail(p + ".function.name", "'" + p + ".function.name' must be 1-64 characters of [A-Za-z0-9_-]");
  if (auto desc = fn.find("description"); desc != fn.end()) d.description = get_string(*desc, p + ".function.description");
  if (auto params = fn.find("parameters"); params != fn.end()) {
    check_schema_shape(*params, p + ".function.parameters");
    d.parameters_json = params->dump();
  } else {
    d.parameters_json = R"({"type":"object","properties":{}})";
  }
  if (auto ex = t.find("execution"); ex != t.end()) {
    std::string q = p + ".execution";
    if (!ex->is_object()) fail(q, "'" + q + "' must be an object");
    only_keys(*ex, q, {"type", "url", "timeout_ms", "max_retries"});
    if (get_string(need(*ex, "type", q + ".type"), q + ".type") != "http")
      fail(q + ".type", "'" + q + ".type' must be \"http\"");
    check_url(guard, need(*ex, "url", q + ".url"), q + ".url");
    if (auto to = ex->find("timeout_ms"); to != ex->end()) get_int(*to, q + ".timeout_ms", 1, 300000);
    if (auto mr = ex->find("max_retries"); mr != ex->end()) get_int(*mr, q + ".max_retries", 0, 10);
  }
  return d;
}

void parse_sampling(const json& b, sampling_params& s) {
  if (auto v = b.find("temperature"); v != b.end()) s.temperature = float(get_number(*v, "temperature", 0, 2));
  if (auto v = b.find("top_p"); v != b.end()) s.top_p = float(get_number(*v, "top_p", 0, 1));
  if (auto v = b.find("top_k"); v != b.end()) s.top_k = int32_t(get_int(*v, "top_k", 0, 100000));
  if (auto v = b.find("min_p"); v != b.end()) s.min_p = float(get_number(*v, "min_p", 0, 1));
  if (auto v = b.find("seed"); v != b.end()) s.seed = uint64_t(get_int(*v, "seed", 0, INT64_MAX));
  if (auto v = b.find("frequency_penalty"); v != b.end())
    s.frequency_penalty = float(get_number(*v, "frequency_penalty", -2, 2));
  if (auto v = b.find("presence_penalty"); v != b.end())
    s.presence_penalty = float(get_number(*v, "presence_penalty", -2, 2));
  if (auto v = b.find("repeat_penalty"); v != b.end())
    s.repeat_penalty = float(get_number(*v, "repeat_penalty", 0.01, 10));
}

// Which field an engine validation message is about.
std::string engine_param(const std::string& msg, bool has_schema) {
  auto has = [&](const char* w) { return msg.find(w) != std::string::npos; };
  if (has_schema && (has("response") || has("response_format"))) return "response_format";
  if (has("tool")) return "tools";
  if (has_schema && has("schema")) return "response_format";
  if (has("schema")) return "tools";
  return "messages";
}

validated_job validate_or_throw(const json& b, const model_catalog& catalog, const net::ssrf_guard& guard,
                                const validation_limits& limits) {
  if (!b.is_object()) fail("", "the request body must be a JSON object");
  only_keys(b, "",
            {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "temperature",
             "top_p", "top_k", "min_p", "seed", "frequency_penalty", "presence_penalty", "repeat_penalty",
             "max_turns", "max_output_tokens", "max_tokens_per_turn", "deadline_seconds", "priority", "webhook",
             "metadata", "stream_tokens", "stop", "tool_choice_every_turn", "json_whitespace", "store", "prediction"});
  validated_job out;
  out.model = get_string(need(b, "model", "model"), "model", false);
  const model_info* mi = nullptr;
  auto models = catalog.list();
  for (const auto& m : models)
    if (m.name == out.model) mi = &m;
  if (!mi) {
    std::string names;
    for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
    fail("model", "unknown model '" + out.model + "' (available: " + (names.empty() ? "none" : names) + ")");
  }
  turn_request& tr = out.first_turn;

  const json& msgs = need(b, "messages", "messages");
  if (!msgs.is_array()) fail("messages", "'messages' must be an array");
  if (msgs.empty()) fail("messages", "'messages' must not be empty");
  if (msgs.size() > size_t(limits.max_messages))
    fail("messages", "'messages' has more than " + std::to_string(limits.max_messages) + " entries");
  for (size_t i = 0; i < msgs.size(); ++i) tr.messages.push_back(parse_message(msgs[i], "messages[" + std::to_string(i) + "]"));
  // a tool message answers a call an earlier assistant message made and no tool message answered yet
  std::set<std::string> open_calls;
  for (size_t i = 0; i < tr.messages.size(); ++i) {
    const auto& m = tr.messages[i];
    for (const auto& t : m.tool_calls) open_calls.insert(t.id);
    if (m.role == role::tool && open_calls.erase(m.tool_call_id) == 0) {
      std::string p = "messages[" + std::to_string(i) + "].tool_call_id";
      fail(p, "'" + p + "' is '" + m.tool_call_id + "', which answers no earlier assistant tool call");
    }
  }

  std::set<std::string> tool_names;
  if (auto tools = b.find("tools"); tools != b.end()) {
    if (!tools->is_array()) fail("tools", "'tools' must be an array");
    if (tools->size() > size_t(limits.max_tools))
      fail("tools", "'tools' has more than " + std::to_string(limits.max_tools) + " entries");
    for (size_t i = 0; i < tools->size(); ++i) {
      std::string p = "tools[" + std::to_string(i) + "]";
      tool_def d = parse_tool((*tools)[i], p, guard, limits);
      if (!tool_names.insert(d.name).second) fail(p + ".function.name", "duplicate tool name '" + d.name + "'");
      tr.tools.push_back(std::move(d));
    }
  }
  // NOTE: a model whose chat template matches no family renders as plain text; that is
  // tolerable for a chat but not for tool calls (no syntax the model knows), so refuse.
  if (!tr.tools.empty() && mi->chat_family == "unknown")
    fail("tools", "model '" + out.model + "' has a chat template that matches no chat family, so agentq cannot "
                  "format tool definitions or parse tool calls for it; choose a family with agentqd --model " +
                  out.model + ".gguf --chat-family NAME (chatml, qwen3, hermes, llama3, mistral, phi3, smollm3, "
                  "gemma, deepseek-r1, harmony, plain; see docs/chat_and_grammar.md)");
  if (auto tc = b.find("tool_choice"); tc != b.end()) {
    if (tc->is_string()) {
      std::string s = tc->get<std::string>();
      if (s == "auto") tr.choice.mode = tool_choice_mode::automatic;
      else if (s == "none") tr.choice.mode = tool_choice_mode::none;
      else if (s == "required") tr.choice.mode = tool_choice_mode::required;
      else fail("tool_choice", "'tool_choice' must be auto, none, required or {\"type\":\"function\",...}");
    } else if (tc->is_object()) {
      const json& fn = need(*tc, "function", "tool_choice.function");
      if (!fn.is_object()) fail("tool_choice.function", "'tool_choice.function' must be an object");
      tr.choice.mode = tool_choice_mode::named;
      tr.choice.name = get_string(need(fn, "name", "tool_choice.function.name"), "tool_choice.function.name");
      if (!tool_names.count(tr.choice.name))
        fail("tool_choice.function.name", "tool_choice names '" + tr.choice.name + "', which is not in 'tools'");
    } else {
      fail("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (tr.choice.mode == tool_choice_mode::required && tr.tools.empty())
      fail("tool_choice", "tool_choice 'required' needs at least one tool");
  }
  if (auto v = b.find("parallel_tool_calls"); v != b.end()) tr.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");
  if (auto v = b.find("json_whitespace"); v != b.end()) {
    std::string ws = get_string(*v, "json_whitespace");
    if (ws != "spaced" && ws != "free")
      fail("json_whitespace", "'json_whitespace' must be \"spaced\" (the default: compact JSON, one space after ':' and ',') or \"free\"");
    tr.json_ws = ws == "free" ? json_whitespace::free : json_whitespace::spaced;
  }
  if (auto v = b.find("stream_tokens"); v != b.end()) get_bool(*v, "stream_tokens");
  if (auto v = b.find("store"); v != b.end()) out.store = get_bool(*v, "store");
  if (auto v = b.find("tool_choice_every_turn"); v != b.end()) get_bool(*v, "tool_choice_every_turn");
  if (auto rf = b.find("response_format"); rf != b.end()) {
    if (!rf->is_object()) fail("response_format", "'response_format' must be an object");
    std::string t = get_string(need(*rf, "type", "response_format.type"), "response_format.type");
    if (t == "json_object") {
      tr.response_schema_json = R"({"type":"object"})";
    } else if (t == "json_schema") {
      const json& js = need(*rf, "json_schema", "response_format.json_schema");
      if (!js.is_object()) fail("response_format.json_schema", "'response_format.json_schema' must be an object");
      const json& schema = need(js, "schema", "response_format.json_schema.schema");
      check_schema_shape(schema, "response_format.json_schema.schema");
      tr.response_schema_json = schema.dump();
    } else if (t != "text") {
      fail("response_format.type", "'response_format.type' must be text, json_object or json_schema");
    }
  }
  parse_sampling(b, tr.sampling);
  // Predicted Outputs (OpenAI's prediction): text the reply is expected to resemble, handed to
  // speculation as lookup text (docs/speculative.md); {"type":"content","content": text or parts}.
  if (auto pr = b.find("prediction"); pr != b.end() && !pr->is_null()) {
    if (!pr->is_object()) fail("prediction", "'prediction' must be an object, not " + std::string(type_name(*pr)));
    only_keys(*pr, "prediction", {"type", "content"});
    if (get_string(need(*pr, "type", "prediction.type"), "prediction.type") != "content")
      fail("prediction.type", "'prediction.type' must be \"content\"");
    const json& c = need(*pr, "content", "prediction.content");
    if (c.is_string()) {
      tr.prediction = c.get<std::string>();
    } else if (c.is_array()) {
      for (size_t i = 0; i < c.size(); ++i) {
        const std::string p = "prediction.content[" + std::to_string(i) + "]";
        if (!c[i].is_object()) fail(p, "'" + p + "' must be an object");
        only_keys(c[i], p, {"type", "text"});
        if (get_string(need(c[i], "type", p + ".type"), p + ".type") != "text")
          fail(p + ".type", "'" + p + ".type' must be \"text\"");
        tr.prediction += get_string(need(c[i], "text", p + ".text"), p + ".text");
      }
    } else {
      fail("prediction.content", "'prediction.content' must be a string or an array of text parts, not " +
                                     std::string(type_name(c)));
    }
  }
  if (auto st = b.find("stop"); st != b.end()) {
    if (!st->is_array() || st->size() > 8) fail("stop", "'stop' must be an array of at most 8 strings");
    for (size_t i = 0; i < st->size(); ++i) tr.stop.push_back(get_string((*st)[i], "stop[" + std::to_string(i) + "]", false));
  }

  int64_t n_ctx = mi->n_ctx > 0 ? mi->n_ctx : 1 << 20;
  if (auto v = b.find("max_turns"); v != b.end()) get_int(*v, "max_turns", 1, limits.max_turns);
  if (auto v = b.find("max_output_tokens"); v != b.end()) get_int(*v, "max_output_tokens", 1, 10000000);
  tr.max_tokens = int32_t(std::min<int64_t>(512, n_ctx));
  if (auto v = b.find("max_tokens_per_turn"); v != b.end()) tr.max_tokens = int32_t(get_int(*v, "max_tokens_per_turn", 1, n_ctx));
  if (auto v = b.find("deadline_seconds"); v != b.end())
    out.deadline_seconds = get_number(*v, "deadline_seconds", 0.001, limits.max_deadline_seconds);
  if (auto v = b.find("priority"); v != b.end()) {
    out.priority = get_string(*v, "priority");
    if (out.priority != "high" && out.priority != "normal" && out.priority != "low")
      fail("priority", "'priority' must be high, normal or low");
  }
  if (auto wh = b.find("webhook"); wh != b.end()) {
    if (!wh->is_object()) fail("webhook", "'webhook' must be an object");
    only_keys(*wh, "webhook", {"url", "events", "secret"});
    check_url(guard, need(*wh, "url", "webhook.url"), "webhook.url");
    out.webhook_url = (*wh)["url"].get<std::string>();
    if (auto ev = wh->find("events"); ev != wh->end()) {
      if (!ev->is_array() || ev->empty()) fail("webhook.events", "'webhook.events' must be a non-empty array");
      for (size_t i = 0; i < ev->size(); ++i) {
        std::string p = "webhook.events[" + std::to_string(i) + "]";
        if (!is_webhook_event(get_string((*ev)[i], p)))
          fail(p, "unknown event '" + (*ev)[i].get<std::string>() +
                      "' (job.requires_action, job.completed, job.failed, job.cancelled, job.incomplete)");
      }
    }
    if (auto sec = wh->find("secret"); sec != wh->end()) {
      std::string s = get_string(*sec, "webhook.secret", false);
      if (!s.starts_with("whsec_") || !webhooks::decode_secret(s))
        fail("webhook.secret", "'webhook.secret' must be \"whsec_\" followed by a base64 key");
    }
  }
  if (auto md = b.find("metadata"); md != b.end()) {
    if (!md->is_object()) fail("metadata", "'metadata' must be an object of strings");
    if (md->size() > size_t(limits.max_metadata_keys))
      fail("metadata", "'metadata' has more than " + std::to_string(limits.max_metadata_keys) + " keys");
    for (auto it = md->begin(); it != md->end(); ++it) {
      std::string p = "metadata." + it.key();
      if (it.key().empty() || it.key().size() > 64) fail("metadata", "metadata keys must be 1-64 characters");
      std::string v = get_string(it.value(), p);
      if (v.size() > limits.max_metadata_value)
        fail(p, "'" + p + "' is longer than " + std::to_string(limits.max_metadata_value) + " characters");
    }
  }

  if (auto why = catalog.validate(out.model, tr))
    fail(engine_param(*why, !tr.response_schema_json.empty()), *why);
  return out;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

namespace {
// nlohmann's what() without its "[json.exception.parse_error.101] parse error at line 1,
// column 5: " prefix: the part a user can act on.
std::string json_error_detail(const json::exception& e) {
  std::string w = e.what();
  if (auto rb = w.find("] "); w.starts_with("[json.exception.") && rb != std::string::npos) w = w.substr(rb + 2);
  if (w.starts_with("parse error")) {
    if (auto colon = w.find(": "); colon != std::string::npos) w = w.substr(colon + 2);
  }
  return w;
}

struct duplicate_key {
  std::string key;
};

// The document json::parse builds, built from the parser's SAX events (as nlohmann's own
// json_sax_dom_parser does), refusing a key seen twice in one object: the insertion finds it.
// NOTE: in place of json::parse with a callback: the callback parser made a JSON string per key and
// kept two more stacks, ~20 allocations a submit (issue 29); the document is the same.
class dom_builder : public json::json_sax_t {
 public:
  json root;

  bool null() override { return put(json(nullptr)); }
  bool boolean(bool v) override { return put(json(v)); }
  bool number_integer(number_integer_t v) override { return put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(json(v)); }
  bool string(string_t& v) override { return put(json(v)); }  // a copy: v is the lexer's buffer
  bool binary(binary_t& v) override { return put(json::binary(v)); }  // not in JSON text; for the interface
  bool start_object(std::size_t) override {
    put(json(json::value_t::object));
    open_.push_back(last_);
    return true;
  }
  bool key(string_t& k) override {
    auto [it, inserted] = open_.back()->get_ref<json::object_t&>().try_emplace(k);
    if (!inserted) throw duplicate_key{k};
    member_ = &it->second;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    put(json(json::value_t::array));
    open_.push_back(last_);
    return true;
  }
  bool end_array() override { return close(); }
  // NOTE: rethrown as its own type: parse_body reads parse_error's byte offset.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    if (const auto* pe = dynamic_cast<const json::parse_error*>(&ex)) throw *pe;
    if (const auto* oor = dynamic_cast<const json::out_of_range*>(&ex)) throw *oor;
    throw ex;
  }

 private:
  // The value goes into the open array, the open object under the last key, or the root.
  bool put(json&& v) {
    if (open_.empty()) {
      root = std::move(v);
      last_ = &root;
    } else if (open_.back()->is_array()) {
      auto& a = open_.back()->get_ref<json::array_t&>();
      a.push_back(std::move(v));
      last_ = &a.back();  // NOTE: stable while it is open: only the innermost container grows
    } else {
      *member_ = std::move(v);
      last_ = member_;
    }
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  std::vector<json*> open_;  // the open objects and arrays, innermost last
  json* member_ = nullptr;   // the open object's member the next value fills
  json* last_ = nullptr;     // the value put last
};
}  // namespace

std::optional<json> parse_body(const std::string& body, std::string_view content_type, validation_error* err) {
  // NOTE: a missing Content-Type is accepted (old clients); a declared non-JSON one is refused
  // with 400, as issue #24 asks of every refused body, rather than 415 (same JSON error body).
  std::string_view media_raw = content_type.substr(0, content_type.find(';'));
  while (!media_raw.empty() && (media_raw.back() == ' ' || media_raw.back() == '\t')) media_raw.remove_suffix(1);
  while (!media_raw.empty() && (media_raw.front() == ' ' || media_raw.front() == '\t')) media_raw.remove_prefix(1);
  // case-insensitive: the lowercased copy is made only for a refusal's message
  auto ends_with_nocase = [&](std::string_view suffix) {
    return media_raw.size() >= suffix.size() &&
           std::equal(suffix.begin(), suffix.end(), media_raw.end() - suffix.size(),
                      [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
  };
  const bool json_media =
      media_raw.empty() || (media_raw.size() == 16 && ends_with_nocase("application/json")) || ends_with_nocase("+json");
  if (!json_media) {
    std::string media(media_raw);
    for (char& ch : media) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    *err = {http::error_kind::invalid_request,
            "the request body must be JSON (Content-Type: application/json), not '" + media + "'", "Content-Type"};
    return std::nullopt;
  }
  if (!is_valid_utf8(body)) {
    *err = {http::error_kind::invalid_request, "the request body is not valid UTF-8", ""};
    return std::nullopt;
  }
  if (util::json_depth(body) > util::k_max_json_depth) {
    *err = {http::error_kind::invalid_request,
            "the request body nests objects/arrays deeper than " + std::to_string(util::k_max_json_depth) + " levels",
            ""};
    return std::nullopt;
  }
  // a key seen twice in one object is refused (RFC 8259 leaves its meaning open; nlohmann would
  // keep the last silently)
  try {
    dom_builder dom;
    json::sax_parse(body, &dom);
    return std::move(dom.root);
  } catch (const duplicate_key& d) {
    *err = {http::error_kind::invalid_request, "invalid JSON: the key '" + d.key + "' appears twice in one object", ""};
    return std::nullopt;
  } catch (const json::parse_error& e) {
    *err = {http::error_kind::invalid_request,
            "invalid JSON at byte " + std::to_string(e.byte) + ": " + json_error_detail(e), ""};
    return std::nullopt;
  } catch (const json::exception& e) {  // out_of_range for numbers like 1e400
    *err = {http::error_kind::invalid_request, "invalid JSON: " + json_error_detail(e), ""};
    return std::nullopt;
  }
}

std::optional<validated_job> validate_job(const json& body, const model_catalog& catalog,
                                          const net::ssrf_guard& guard, const validation_limits& limits,
                                          validation_error* err) {
  try {
    return validate_or_throw(body, catalog, guard, limits);
  } catch (const invalid& e) {
    *err = e.e;
    return std::nullopt;
  } catch (const json::exception& e) {
    *err = {http::error_kind::invalid_request, "invalid request: " + json_error_detail(e), ""};
    return std::nullopt;
  }
}

bool is_webhook_event(const std::string& name) {
  return name == "job.requires_action" || name == "job.completed" || name == "job.failed" ||
         name == "job.cancelled" || name == "job.incomplete";
}

}  // namespace agentq::api
