// OpenAI request -> agentq job spec, and job row -> OpenAI object (see openai_map.h, docs/openai.md).
#include "api/openai_map.h"

#include <algorithm>
#include <cstdio>

#include "api/job_view.h"
#include "api/json_text.h"
#include "api/model_catalog.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {

struct refused {
  validation_error e;
};

[[noreturn]] void fail(std::string param, std::string message) {
  throw refused{{http::error_kind::invalid_request, std::move(message), std::move(param)}};
}
[[noreturn]] void unsupported(const std::string& param, const std::string& why = "") {
  fail(param, "'" + param + "' is not supported by agentq" + (why.empty() ? "" : " (" + why + ")") +
                  "; see docs/openai.md");
}

json parse_or(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

const std::string& need_string(const json& v, const std::string& param) {
  if (!v.is_string()) fail(param, "'" + param + "' must be a string");
  return v.get_ref<const std::string&>();
}
bool need_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) fail(param, "'" + param + "' must be a boolean");
  return v.get<bool>();
}
int64_t need_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) fail(param, "'" + param + "' must be an integer");
  int64_t i = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX)) : v.get<int64_t>();
  if (i < lo || i > hi) fail(param, "'" + param + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

const model_info* find_model(const model_catalog& catalog, const json& body, std::vector<model_info>& keep) {
  keep = catalog.list();
  auto it = body.find("model");
  if (it == body.end() || !it->is_string()) return nullptr;  // validate_job names the error
  for (const auto& m : keep)
    if (m.name == it->get<std::string>()) return &m;
  return nullptr;
}

// Text of a content value: a string, or an array of text parts of the allowed types.
std::string text_of(const json& content, const std::string& param, std::initializer_list<const char*> part_types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail(param, "'" + param + "' must be a string or an array of text parts");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = content[i];
    if (!part.is_object()) fail(p, "'" + p + "' must be an object");
    std::string type = need_string(part.value("type", json()), p + ".type");
    bool ok = false;
    for (const char* t : part_types) ok = ok || type == t;
    if (!ok) unsupported(p + ".type", "content part type '" + type + "'; agentq serves text models");
    out += need_string(part.value("text", json()), p + ".text");
  }
  return out;
}

// "messages: the prompt has N tokens, the model's context is M" -> (N, M).
std::optional<std::pair<int64_t, int64_t>> context_overflow(const std::string& msg) {
  long long n = 0, m = 0;
  auto at = msg.find("the prompt has ");
  if (at == std::string::npos) return std::nullopt;
  if (std::sscanf(msg.c_str() + at, "the prompt has %lld tokens, the model's context is %lld", &n, &m) != 2)
    return std::nullopt;
  return std::make_pair(int64_t(n), int64_t(m));
}

// The per-turn and total output limits from an OpenAI max token field (clamped to the context:
// OpenAI's field is an upper bound, and the prompt shares the context anyway).
void set_max_tokens(json& spec, int64_t v, const model_info* mi) {
  int64_t n_ctx = mi && mi->n_ctx > 0 ? mi->n_ctx : (1 << 20);
  spec["max_output_tokens"] = v;
  spec["max_tokens_per_turn"] = std::min<int64_t>(v, n_ctx);
}

void validate_spec(const json& spec, const model_catalog& catalog, const net::ssrf_guard& guard,
                   const validation_limits& limits) {
  validation_error err;
  if (!validate_job(spec, catalog, guard, limits, &err)) throw refused{err};
}

std::string hex_of(const std::string& job_id) { return job_id.size() > 4 ? job_id.substr(4) : job_id; }

std::string message_item_id(const std::string& response_id, int32_t turn) {
  return "msg_" + response_id.substr(5) + "_" + std::to_string(turn);
}
std::string function_item_id(const std::string& call_id) {
  return "fc_" + (call_id.starts_with("call_") ? call_id.substr(5) : call_id);
}

json chat_tool_calls(const std::string& tool_calls_json) {
  json out = json::array();
  for (const auto& c : parse_or(tool_calls_json, json::array()))
    out.push_back({{"id", c.value("id", "")},
                   {"type", "function"},
                   {"function", {{"name", c.value("name", "")}, {"arguments", c.value("arguments", "{}")}}}});
  return out;
}

const store::transcript_row* last_turn(const std::vector<store::transcript_row>& transcript) {
  const store::transcript_row* last = nullptr;
  for (const auto& r : transcript)
    if (r.role == "assistant" && r.turn_idx >= 0) last = &r;
  return last;
}

}  // namespace

// ---------------------------------------------------------------------------
// Chat Completions

std::optional<openai_job> map_chat_request(const json& body, const model_catalog& catalog,
                                           const net::ssrf_guard& guard, const validation_limits& limits,
                                           validation_error* err) {
  try {
    if (!body.is_object()) fail("", "the request body must be a JSON object");
    std::vector<model_info> models;
    const model_info* mi = find_model(catalog, body, models);
    openai_job out;
    json spec = json::object();
    json ext = {{"surface", "chat"}};
    for (auto it = body.begin(); it != body.end(); ++it) {
      const std::string& key = it.key();
      const std::string_view k = key;  // NOTE: compared by size first (a string == literal ran memcmp each time)
      const json& v = it.value();
      if (v.is_null() && k != "model" && k != "messages") continue;  // the SDKs send null for "unset"
      if (k == "model" || k == "tools" || k == "tool_choice" || k == "parallel_tool_calls" || k == "temperature" ||
          k == "top_p" || k == "seed" || k == "frequency_penalty" || k == "presence_penalty" ||
          k == "response_format" || k == "metadata") {
        spec[key] = v;
      } else if (k == "messages") {
        if (!v.is_array()) fail("messages", "'messages' must be an array");
        json msgs = json::array();
        for (size_t i = 0; i < v.size(); ++i) {
          std::string p = "messages[" + std::to_string(i) + "]";
          const json& m = v[i];
          if (!m.is_object()) fail(p, "'" + p + "' must be an object");
          json nm = json::object();
          for (auto mt = m.begin(); mt != m.end(); ++mt) {
            const std::string& mk = mt.key();
            if (mt.value().is_null() && mk != "content") continue;
            if (mk == "role") {
              std::string r = need_string(mt.value(), p + ".role");
              nm["role"] = r == "developer" ? "system" : r;
            } else if (mk == "content") {
              nm["content"] = mt.value().is_null() ? json(nullptr)
                                                   : json(text_of(mt.value(), p + ".content", {"text", "input_text"}));
            } else if (mk == "tool_calls" || mk == "tool_call_id") {
              nm[mk] = mt.value();
            } else if (mk == "name") {
              if (m.value("role", "") != "tool") unsupported(p + ".name", "participant names");
              nm["name"] = mt.value();
            } else if (mk == "refusal") {
              unsupported(p + ".refusal");
            } else {
              unsupported(p + "." + mk);
            }
          }
          msgs.push_back(std::move(nm));
        }
        spec["messages"] = std::move(msgs);
      } else if (k == "max_tokens" || k == "max_completion_tokens") {
        set_max_tokens(spec, need_int(v, key, 1, 10000000), mi);
      } else if (k == "stop") {
        if (v.is_string()) spec["stop"] = json::array({v});
        else spec["stop"] = v;
      } else if (k == "n") {
        if (need_int(v, "n", 1, 128) != 1) unsupported("n", "one choice per request; send n: 1");
      } else if (k == "stream") {
        out.stream = need_bool(v, "stream");
      } else if (k == "stream_options") {
        if (!v.is_object()) fail("stream_options", "'stream_options' must be an object");
        for (auto so = v.begin(); so != v.end(); ++so) {
          if (so.key() == "include_usage") out.include_usage = need_bool(so.value(), "stream_options.include_usage");
          else unsupported("stream_options." + so.key());
        }
      } else if (k == "user") {
        ext["user"] = need_string(v, "user");
      } else if (k == "store") {
        if (need_bool(v, "store")) unsupported("store", "chat completions are not stored for later retrieval; use /v1/responses");
      } else if (k == "logprobs") {
        if (need_bool(v, "logprobs")) unsupported("logprobs");
      } else if (k == "service_tier") {
        std::string t = need_string(v, "service_tier");
        if (t != "auto" && t != "default") unsupported("service_tier");
      } else if (k == "modalities") {
        if (v != json::array({"text"})) unsupported("modalities", "text only");
      } else if (k == "logit_bias") {
        if (!v.is_object() || !v.empty()) unsupported("logit_bias");
      } else if (k == "prediction") {
        spec["prediction"] = v;  // Predicted Outputs: checked by validate_job (docs/openai.md)
      } else {
        // top_logprobs, audio, reasoning_effort, web_search_options, functions, ...
        unsupported(key);
      }
    }
    if (body.contains("stream_options") && !body["stream_options"].is_null() && !out.stream)
      fail("stream_options", "'stream_options' is only allowed with stream: true");
    spec["priority"] = "high";  // the interactive class: a person waits on this answer
    if (out.stream) spec["stream_tokens"] = true;
    validate_spec(spec, catalog, guard, limits);
    if (out.include_usage) ext["include_usage"] = true;
    spec["openai"] = std::move(ext);
    spec["client_tool_calls"] = "finish";  // a call to a client tool ends the job (finish_reason tool_calls)
    out.spec = std::move(spec);
    return out;
  } catch (const refused& r) {
    *err = r.e;
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------
// Responses

namespace {

json response_tool_to_job(const json& t, const std::string& p) {
  if (!t.is_object()) fail(p, "'" + p + "' must be an object");
  std::string type = need_string(t.value("type", json()), p + ".type");
  if (type != "function") unsupported(p + ".type", "tool type '" + type + "'; function tools only");
  json fn = json::object();
  json job_tool = {{"type", "function"}};
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type") continue;
    if (it.value().is_null()) continue;
    if (k == "name" || k == "description" || k == "parameters") fn[k] = it.value();
    else if (k == "strict") need_bool(it.value(), p + ".strict");  // NOTE: calls are always grammar-constrained
    else if (k == "execution") job_tool["execution"] = it.value();  // agentq extension: a server-side HTTP tool
    else unsupported(p + "." + k);
  }
  if (!fn.contains("name")) fail(p + ".name", "missing required field '" + p + ".name'");
  job_tool["function"] = std::move(fn);
  return job_tool;
}

// Input items -> job messages (+ the items as GET input_items lists them).
void map_input(const json& input, const std::string& response_id, json& msgs, json& items) {
  auto item_id = [&](size_t i, const char* prefix) {
    return std::string(prefix) + response_id.substr(5) + "_in" + std::to_string(i);
  };
  if (input.is_string()) {
    msgs.push_back({{"role", "user"}, {"content", input}});
    items.push_back({{"id", item_id(0, "msg_")},
                     {"type", "message"},
                     {"role", "user"},
                     {"status", "completed"},
                     {"content", json::array({{{"type", "input_text"}, {"text", input}}})}});
    return;
  }
  if (!input.is_array()) fail("input", "'input' must be a string or an array of items");
  if (input.empty()) fail("input", "'input' must not be empty");
  for (size_t i = 0; i < input.size(); ++i) {
    std::string p = "input[" + std::to_string(i) + "]";
    const json& it = input[i];
    if (!it.is_object()) fail(p, "'" + p + "' must be an object");
    std::string type = it.contains("type") ? need_string(it["type"], p + ".type") : "message";
    if (type == "message") {
      for (auto f = it.begin(); f != it.end(); ++f)
        if (f.key() != "type" && f.key() != "role" && f.key() != "content" && f.key() != "id" && f.key() != "status")
          unsupported(p + "." + f.key());
      std::string role = need_string(it.value("role", json()), p + ".role");
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant")
        fail(p + ".role", "'" + p + ".role' must be user, system, developer or assistant");
      std::string text = text_of(it.value("content", json()), p + ".content",
                                 {"input_text", "output_text", "text"});
      msgs.push_back({{"role", role}, {"content", text}});
      const char* part = role == "assistant" ? "output_text" : "input_text";
      items.push_back({{"id", it.value("id", item_id(i, "msg_"))},
                       {"type", "message"},
                       {"role", it.value("role", role)},
                       {"status", "completed"},
                       {"content", json::array({{{"type", part}, {"text", text}}})}});
    } else if (type == "function_call") {
      std::string call_id = need_string(it.value("call_id", json()), p + ".call_id");
      std::string name = need_string(it.value("name", json()), p + ".name");
      std::string args = need_string(it.value("arguments", json()), p + ".arguments");
      json call = {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
      // consecutive calls are one assistant message, as the model emitted them
      if (!msgs.empty() && msgs.back().value("role", "") == "assistant" && msgs.back().contains("tool_calls") &&
          msgs.back().value("content", json()).is_null())
        msgs.back()["tool_calls"].push_back(call);
      else
        msgs.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}});
      items.push_back({{"id", it.value("id", function_item_id(call_id))},
                       {"type", "function_call"},
                       {"call_id", call_id},
                       {"name", name},
                       {"arguments", args},
                       {"status", "completed"}});
    } else if (type == "function_call_output") {
      std::string call_id = need_string(it.value("call_id", json()), p + ".call_id");
      const json& o = it.value("output", json());
      std::string output = o.is_string() ? o.get<std::string>() : text_of(o, p + ".output", {"input_text"});
      msgs.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", output}});
      items.push_back({{"id", it.value("id", item_id(i, "fco_"))},
                       {"type", "function_call_output"},
                       {"call_id", call_id},
                       {"output", output},
                       {"status", "completed"}});
    } else {
      unsupported(p + ".type", "input item type '" + type + "'");
    }
  }
}

}  // namespace

std::optional<openai_job> map_response_request(const json& body, const response_chain* prev,
                                               const model_catalog& catalog, const net::ssrf_guard& guard,
                                               const validation_limits& limits, validation_error* err) {
  try {
    if (!body.is_object()) fail("", "the request body must be a JSON object");
    std::vector<model_info> models;
    const model_info* mi = find_model(catalog, body, models);
    openai_job out;
    json spec = json::object();
    json ext = {{"surface", "responses"}};
    json instructions;
    const json* input = nullptr;
    bool store_it = true;
    std::string truncation = "disabled";
    for (auto it = body.begin(); it != body.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      if (v.is_null() && k != "model" && k != "input") continue;
      if (k == "model" || k == "parallel_tool_calls" || k == "temperature" || k == "top_p" || k == "metadata") {
        spec[k] = v;
        ext[k] = v;
      } else if (k == "input") {
        input = &v;
      } else if (k == "instructions") {
        instructions = need_string(v, "instructions");
      } else if (k == "tools") {
        if (!v.is_array()) fail("tools", "'tools' must be an array");
        json tools = json::array();
        for (size_t i = 0; i < v.size(); ++i) tools.push_back(response_tool_to_job(v[i], "tools[" + std::to_string(i) + "]"));
        spec["tools"] = std::move(tools);
        ext["tools"] = v;
      } else if (k == "tool_choice") {
        ext["tool_choice"] = v;
        if (v.is_string()) {
          spec["tool_choice"] = v;
        } else if (v.is_object()) {
          std::string t = need_string(v.value("type", json()), "tool_choice.type");
          if (t != "function") unsupported("tool_choice.type", "'" + t + "'");
          spec["tool_choice"] = {{"type", "function"},
                                 {"function", {{"name", need_string(v.value("name", json()), "tool_choice.name")}}}};
        } else {
          fail("tool_choice", "'tool_choice' must be a string or an object");
        }
      } else if (k == "max_output_tokens") {
        int64_t n = need_int(v, k, 1, 10000000);
        set_max_tokens(spec, n, mi);
        ext[k] = n;
      } else if (k == "max_tool_calls") {
        // NOTE: bounds model turns (a turn after each round of tool calls), the unit agentq counts
        int64_t n = need_int(v, k, 0, limits.max_turns - 1);
        spec["max_turns"] = n + 1;
        ext[k] = n;
      } else if (k == "text") {
        if (!v.is_object()) fail("text", "'text' must be an object");
        for (auto t = v.begin(); t != v.end(); ++t) {
          if (t.key() == "verbosity" && (t.value().is_null() || t.value() == "medium")) continue;
          if (t.key() != "format") unsupported("text." + t.key());
        }
        if (auto f = v.find("format"); f != v.end() && !f->is_null()) {
          if (!f->is_object()) fail("text.format", "'text.format' must be an object");
          std::string t = need_string(f->value("type", json()), "text.format.type");
          if (t == "json_object") {
            spec["response_format"] = {{"type", "json_object"}};
          } else if (t == "json_schema") {
            if (!f->contains("schema")) fail("text.format.schema", "missing required field 'text.format.schema'");
            spec["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", (*f)["schema"]}}}};
          } else if (t != "text") {
            fail("text.format.type", "'text.format.type' must be text, json_object or json_schema");
          }
        }
        ext["text"] = v;
      } else if (k == "store") {
        store_it = need_bool(v, "store");
      } else if (k == "background") {
        out.background = need_bool(v, "background");
      } else if (k == "stream") {
        out.stream = need_bool(v, "stream");
      } else if (k == "previous_response_id") {
        ext[k] = need_string(v, k);
      } else if (k == "truncation") {
        truncation = need_string(v, "truncation");
        if (truncation != "disabled" && truncation != "auto")
          fail("truncation", "'truncation' must be \"disabled\" or \"auto\"");
      } else if (k == "user") {
        ext["user"] = need_string(v, "user");
      } else if (k == "prediction") {
        spec["prediction"] = v;  // Predicted Outputs, as on Chat Completions (agentq extension)
      } else if (k == "include") {
        if (!v.is_array() || !v.empty()) unsupported("include");
      } else if (k == "service_tier") {
        std::string t = need_string(v, "service_tier");
        if (t != "auto" && t != "default") unsupported("service_tier");
      } else {
        // reasoning, top_logprobs, prompt, conversation, prompt_cache_key, safety_identifier, ...
        unsupported(k);
      }
    }
    if (body.contains("previous_response_id") && !body["previous_response_id"].is_null() && !prev)
      fail("previous_response_id", "previous_response_id names no stored response");
    if (!input) fail("input", "missing required field 'input'");
    if (out.background && !store_it) fail("store", "background responses must be stored (store: true)");

    json msgs = json::array();
    if (!instructions.is_null()) msgs.push_back({{"role", "system"}, {"content", instructions}});
    size_t n_fixed = msgs.size();  // never truncated
    if (prev)
      for (const auto& m : prev->messages) msgs.push_back(m);
    json items = json::array();
    std::string placeholder_id = "resp_000000000000000000000000";
    map_input(*input, placeholder_id, msgs, items);
    spec["priority"] = out.background ? "normal" : "high";  // a foreground response has a person waiting
    if (out.stream) spec["stream_tokens"] = true;

    // truncation: drop the oldest items (never the instructions) until the prompt fits
    int32_t n_dropped = 0;
    for (;;) {
      spec["messages"] = msgs;
      validation_error verr;
      if (validate_job(spec, catalog, guard, limits, &verr)) break;
      auto over = context_overflow(verr.message);
      if (!over) {
        if (verr.param == "messages" || verr.param.starts_with("messages[")) verr.param = "input";
        throw refused{verr};
      }
      if (truncation != "auto" || msgs.size() <= n_fixed + 1)
        fail("input", "the input is " + std::to_string(over->first) + " tokens, over the model's context of " +
                          std::to_string(over->second) + " by " + std::to_string(over->first - over->second) +
                          " tokens" + (truncation == "auto" ? "" : " (truncation: \"auto\" drops the oldest input items)"));
      msgs.erase(msgs.begin() + long(n_fixed));
      ++n_dropped;
      // a tool result whose call was dropped goes with it
      while (msgs.size() > n_fixed + 1 && msgs[n_fixed].value("role", "") == "tool") {
        msgs.erase(msgs.begin() + long(n_fixed));
        ++n_dropped;
      }
    }
    ext["instructions"] = instructions;
    ext["n_instructions"] = n_fixed;
    ext["store"] = store_it;
    ext["background"] = out.background;
    ext["truncation"] = truncation;
    if (n_dropped) ext["n_truncated"] = n_dropped;
    ext["input_items"] = std::move(items);
    spec["openai"] = std::move(ext);
    spec["client_tool_calls"] = "finish";  // function_call items end the response (OpenAI's flow)
    // NOTE: set after validate_job, so /v1/jobs cannot name them: a stored response keeps its KV
    // (--response-kv-ttl-s) and a continuation runs under its chain's KV key (worker/kv_retention.h).
    if (store_it) spec["keep_kv"] = true;
    if (prev && !prev->kv_chain.empty()) spec["kv_chain"] = prev->kv_chain;
    out.spec = std::move(spec);
    return out;
  } catch (const refused& r) {
    *err = r.e;
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------
// Ids and views

std::string response_id_of(const std::string& job_id) { return "resp_" + hex_of(job_id); }
std::string chat_id_of(const std::string& job_id) { return "chatcmpl-" + hex_of(job_id); }

std::optional<std::string> job_id_of_response(const std::string& response_id) {
  if (!response_id.starts_with("resp_") || response_id.size() != 29) return std::nullopt;
  for (size_t i = 5; i < response_id.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(response_id[i]))) return std::nullopt;
  return "job_" + response_id.substr(5);
}

std::string openai_surface(const store::job_row& job) {
  json req = request_fields(job.request_json, {"openai"});
  if (!req.is_object() || !req.contains("openai") || !req["openai"].is_object()) return "";
  return req["openai"].value("surface", "");
}

std::string response_status(store::job_status s) {
  switch (s) {
    case store::job_status::queued: return "queued";
    case store::job_status::running:
    case store::job_status::requires_action: return "in_progress";
    case store::job_status::completed: return "completed";
    case store::job_status::failed: return "failed";
    case store::job_status::cancelled: return "cancelled";
    case store::job_status::incomplete: return "incomplete";
  }
  return "failed";
}

json response_output(const std::string& response_id, const std::vector<store::transcript_row>& transcript) {
  json out = json::array();
  for (const auto& r : transcript) {
    if (r.role != "assistant" || r.turn_idx < 0) continue;
    bool has_calls = !r.tool_calls_json.empty() && r.tool_calls_json != "[]";
    if (!r.content.empty() || !has_calls)  // a final turn always has its message, even an empty one
      out.push_back({{"type", "message"},
                     {"id", message_item_id(response_id, r.turn_idx)},
                     {"status", "completed"},
                     {"role", "assistant"},
                     {"content", json::array({{{"type", "output_text"}, {"text", r.content}, {"annotations", json::array()}, {"logprobs", json::array()}}})}});
    for (const auto& c : parse_or(r.tool_calls_json, json::array())) {
      std::string call_id = c.value("id", "");
      out.push_back({{"type", "function_call"},
                     {"id", function_item_id(call_id)},
                     {"call_id", call_id},
                     {"name", c.value("name", "")},
                     {"arguments", c.value("arguments", "{}")},
                     {"status", "completed"}});
    }
  }
  return out;
}

json response_object(const store::job_row& job, const std::vector<store::transcript_row>& transcript) {
  json req = request_fields(job.request_json, {"openai", "model", "metadata"});
  json ext = req.value("openai", json::object());
  std::string id = response_id_of(job.id);
  std::string status = response_status(job.status);
  json output = response_output(id, transcript);
  std::string text;
  for (const auto& item : output)
    if (item["type"] == "message")
      for (const auto& part : item["content"]) text += part.value("text", "");
  json usage = nullptr;
  if (store::is_terminal(job.status)) {
    json u = usage_object(job.usage_json);
    int64_t in = u["prompt_tokens"], outn = u["completion_tokens"];
    usage = {{"input_tokens", in},
             {"input_tokens_details", {{"cached_tokens", u["cached_tokens"]}}},
             {"output_tokens", outn},
             // NOTE: Chat Completions' speculation names, here too (agentq extension on Responses)
             {"output_tokens_details",
              {{"reasoning_tokens", 0},
               {"accepted_prediction_tokens", u["completion_tokens_details"]["accepted_prediction_tokens"]},
               {"rejected_prediction_tokens", u["completion_tokens_details"]["rejected_prediction_tokens"]}}},
             {"total_tokens", in + outn}};
  }
  json incomplete = nullptr;
  if (job.status == store::job_status::incomplete) {
    std::string reason = job.error.find("max_turns") != std::string::npos ? "max_tool_calls"
                         : job.error.find("deadline") != std::string::npos ? "deadline"
                                                                           : "max_output_tokens";
    incomplete = {{"reason", reason}};
  }
  json error = nullptr;
  if (job.status == store::job_status::failed)
    error = {{"code", "server_error"}, {"message", job.error.empty() ? "the response failed" : job.error}};
  json o = {{"id", id},
            {"object", "response"},
            {"created_at", job.created_ms / 1000},
            {"status", status},
            {"background", ext.value("background", false)},
            {"error", error},
            {"incomplete_details", incomplete},
            {"instructions", ext.value("instructions", json())},
            {"max_output_tokens", ext.value("max_output_tokens", json())},
            {"max_tool_calls", ext.value("max_tool_calls", json())},
            {"model", req.value("model", "")},
            {"output", output},
            {"output_text", text},
            {"parallel_tool_calls", ext.value("parallel_tool_calls", json(true))},
            {"previous_response_id", ext.value("previous_response_id", json())},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"service_tier", "default"},
            {"store", ext.value("store", true)},
            {"temperature", ext.value("temperature", json(1.0))},
            {"text", ext.value("text", json{{"format", {{"type", "text"}}}})},
            {"tool_choice", ext.value("tool_choice", json("auto"))},
            {"tools", ext.value("tools", json::array())},
            {"top_p", ext.value("top_p", json(1.0))},
            {"truncation", ext.value("truncation", "disabled")},
            {"usage", usage},
            {"user", ext.value("user", json())},
            {"metadata", req.value("metadata", json::object())}};
  if (job.finished_ms > 0) o["completed_at"] = job.finished_ms / 1000;
  if (ext.contains("n_truncated")) o["truncated_input_items"] = ext["n_truncated"];  // agentq extension
  return o;
}

json response_input_items(const store::job_row& job) {
  json req = request_fields(job.request_json, {"openai"});
  json items = req.value("openai", json::object()).value("input_items", json::array());
  // the ids were minted before the job had one (map_input): put the response's own in
  std::string hex = hex_of(job.id);
  for (auto& it : items) {
    std::string id = it.value("id", "");
    auto at = id.find("000000000000000000000000");
    if (at != std::string::npos) it["id"] = id.replace(at, 24, hex);
  }
  return items;
}

json chain_messages(const store::job_row& job, const std::vector<store::transcript_row>& transcript) {
  json req = request_fields(job.request_json, {"openai"});
  size_t skip = req.value("openai", json::object()).value("n_instructions", size_t(0));
  json out = json::array();
  for (size_t i = skip; i < transcript.size(); ++i) {
    const auto& r = transcript[i];
    json m = {{"role", r.role}};
    m["content"] = r.content.empty() && r.role == "assistant" ? json(nullptr) : json(r.content);
    if (!r.tool_calls_json.empty() && r.tool_calls_json != "[]") m["tool_calls"] = chat_tool_calls(r.tool_calls_json);
    if (r.role == "assistant" && m["content"].is_null() && !m.contains("tool_calls")) m["content"] = "";
    if (r.role == "tool") {
      m["tool_call_id"] = r.tool_call_id;
      if (!r.name.empty()) m["name"] = r.name;
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string chat_finish_reason(const store::job_row& job, const std::vector<store::transcript_row>& transcript) {
  const auto* last = last_turn(transcript);
  if (last && !last->tool_calls_json.empty() && last->tool_calls_json != "[]") return "tool_calls";
  if (job.status == store::job_status::incomplete) return "length";
  // NOTE: the turn's usage read without its document (once per Batch output line, issue 29); a
  // "finish" that is not a string reads as absent.
  if (last) {
    const usage_reader u(last->usage_json);
    if (u.finish().is_string() && u.finish().get_ref<const std::string&>() == "length") return "length";
  }
  return "stop";
}

namespace {
// request_model's SAX pass: the first string value of the key "model" at depth 1 of a top-level
// object. NOTE: it stops there (false = abort); the API stores requests as nlohmann dumps, so no key
// appears twice and the first is the one a parsed object would hold.
class model_reader : public json::json_sax_t {
 public:
  std::string model;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool string(string_t& v) override {
    if (at_model_) {
      model = std::move(v);
      return false;
    }
    return true;
  }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    at_model_ = depth_ == 1 && k == "model";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool value() const { return !at_model_; }  // a "model" that is not a string: "" (there is no other)
  bool open(bool is_object) {
    if (at_model_ || (depth_ == 0 && !is_object)) return false;
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool at_model_ = false;
};
}  // namespace

std::string request_model(const std::string& request_json) {
  model_reader r;
  if (!request_json.empty()) json::sax_parse(request_json, &r);
  return std::move(r.model);
}

json chat_completion_object(const store::job_row& job, const std::vector<store::transcript_row>& transcript) {
  const auto* last = last_turn(transcript);
  json message = {{"role", "assistant"}, {"content", last ? json(last->content) : json(nullptr)}, {"refusal", nullptr}};
  if (last && !last->tool_calls_json.empty() && last->tool_calls_json != "[]") {
    message["tool_calls"] = chat_tool_calls(last->tool_calls_json);
    if (last->content.empty()) message["content"] = nullptr;
  }
  json u = usage_object(job.usage_json);
  return {{"id", chat_id_of(job.id)},
          {"object", "chat.completion"},
          {"created", job.created_ms / 1000},
          {"model", request_model(job.request_json)},
          {"system_fingerprint", "agentq"},
          {"choices", json::array({{{"index", 0},
                                    {"message", message},
                                    {"logprobs", nullptr},
                                    {"finish_reason", chat_finish_reason(job, transcript)}}})},
          {"usage", {{"prompt_tokens", u["prompt_tokens"]},
                     {"completion_tokens", u["completion_tokens"]},
                     {"total_tokens", u["total_tokens"]},
                     {"prompt_tokens_details", {{"cached_tokens", u["cached_tokens"]}}},
                     {"completion_tokens_details",
                      {{"reasoning_tokens", 0},
                       {"accepted_prediction_tokens", u["completion_tokens_details"]["accepted_prediction_tokens"]},
                       {"rejected_prediction_tokens", u["completion_tokens_details"]["rejected_prediction_tokens"]}}}}}};
}

std::string chat_completion_json(const store::job_row& job, const std::vector<store::transcript_row>& transcript) {
  const usage_reader u(job.usage_json);
  // NOTE: a usage the reader cannot stand for (usage_reader::complex; agentq never stores one) is
  // made the old way, so the answer is the same in every case.
  if (u.complex()) return chat_completion_object(job, transcript).dump(-1, ' ', false, json::error_handler_t::replace);
  const auto* last = last_turn(transcript);
  const bool calls = last && !last->tool_calls_json.empty() && last->tool_calls_json != "[]";
  const int64_t prompt = u.prompt(), completion = u.completion();
  std::string out;
  out.reserve(512 + (last ? last->content.size() : 0));
  json_writer w(out);
  // Keys in std::map's order, as the object's dump writes them.
  w.raw("{"), w.key("choices"), w.raw("[{"), w.key("finish_reason"), w.str(chat_finish_reason(job, transcript));
  w.raw(","), w.key("index"), w.raw("0");
  w.raw(","), w.key("logprobs"), w.raw("null");
  w.raw(","), w.key("message"), w.raw("{"), w.key("content");
  if (last && !(calls && last->content.empty())) w.str(last->content);
  else w.raw("null");
  w.raw(","), w.key("refusal"), w.raw("null");
  w.raw(","), w.key("role"), w.raw("\"assistant\"");
  if (calls) w.raw(","), w.key("tool_calls"), w.value(chat_tool_calls(last->tool_calls_json));
  w.raw("}}]");
  w.raw(","), w.key("created"), w.i64(job.created_ms / 1000);
  w.raw(","), w.key("id"), w.str(chat_id_of(job.id));
  w.raw(","), w.key("model"), w.str(request_model(job.request_json));
  w.raw(","), w.key("object"), w.raw("\"chat.completion\"");
  w.raw(","), w.key("system_fingerprint"), w.raw("\"agentq\"");
  w.raw(","), w.key("usage"), w.raw("{"), w.key("completion_tokens"), w.i64(completion);
  w.raw(","), w.key("completion_tokens_details"), w.raw("{"), w.key("accepted_prediction_tokens"), w.i64(u.accepted());
  w.raw(","), w.key("reasoning_tokens"), w.raw("0");
  w.raw(","), w.key("rejected_prediction_tokens"), w.i64(u.rejected()), w.raw("}");
  w.raw(","), w.key("prompt_tokens"), w.i64(prompt);
  w.raw(","), w.key("prompt_tokens_details"), w.raw("{"), w.key("cached_tokens"), w.i64(u.cached()), w.raw("}");
  w.raw(","), w.key("total_tokens"), w.i64(prompt + completion);
  w.raw("}}");
  return out;
}

}  // namespace agentq::api
