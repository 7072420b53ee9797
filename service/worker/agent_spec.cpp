// Parsing the job request JSON into an agent_spec (see agent_spec.h for the format).
#include "worker/agent_spec.h"

#include <nlohmann/json.hpp>

namespace agentq::worker {

using json = nlohmann::json;

const tool_spec* agent_spec::find_tool(const std::string& name) const {
  for (auto& t : tools)
    if (t.def.name == name) return &t;
  return nullptr;
}

std::string role_name(role r) {
  switch (r) {
    case role::system: return "system";
    case role::user: return "user";
    case role::assistant: return "assistant";
    case role::tool: return "tool";
  }
  return "user";
}

std::optional<role> parse_role(const std::string& s) {
  if (s == "system" || s == "developer") return role::system;
  if (s == "user") return role::user;
  if (s == "assistant") return role::assistant;
  if (s == "tool") return role::tool;
  return std::nullopt;
}

std::string tool_calls_to_json(const std::vector<tool_call>& calls) {
  json a = json::array();
  for (auto& c : calls) a.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments_json}});
  return a.dump();
}

std::vector<tool_call> tool_calls_from_json(const std::string& text) {
  std::vector<tool_call> out;
  if (text.empty()) return out;
  json a = json::parse(text, nullptr, false);
  if (!a.is_array()) return out;
  for (auto& c : a) {
    if (!c.is_object()) continue;
    tool_call t;
    t.id = c.value("id", "");
    t.name = c.value("name", "");
    const json& args = c.contains("arguments") ? c["arguments"] : json("{}");
    t.arguments_json = args.is_string() ? args.get<std::string>() : args.dump();
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

struct bad_field : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw bad_field(std::string(key) + ": wrong type");
  }
}

chat_message parse_message(const json& m, size_t idx) {
  std::string where = "messages[" + std::to_string(idx) + "]";
  if (!m.is_object()) throw bad_field(where + ": must be an object");
  chat_message out;
  auto r = parse_role(m.value("role", ""));
  if (!r) throw bad_field(where + ".role: must be system, user, assistant or tool");
  out.role = *r;
  if (m.contains("content") && !m["content"].is_null()) {
    if (m["content"].is_string())
      out.content = m["content"].get<std::string>();
    else if (m["content"].is_array()) {  // [{"type":"text","text":..}]
      for (auto& part : m["content"])
        if (part.is_object() && part.value("type", "") == "text") out.content += part.value("text", "");
    } else
      throw bad_field(where + ".content: must be a string");
  }
  if (m.contains("tool_calls")) {
    for (auto& c : m["tool_calls"]) {
      tool_call t;
      const json& f = c.contains("function") ? c["function"] : c;
      t.id = c.value("id", "");
      t.name = f.value("name", "");
      const json& args = f.contains("arguments") ? f["arguments"] : json("{}");
      t.arguments_json = args.is_string() ? args.get<std::string>() : args.dump();
      out.tool_calls.push_back(std::move(t));
    }
  }
  out.tool_call_id = m.value("tool_call_id", "");
  out.name = m.value("name", "");
  if (out.role == role::tool && out.tool_call_id.empty()) throw bad_field(where + ".tool_call_id: required for tool messages");
  return out;
}

tool_spec parse_tool(const json& t, size_t idx) {
  std::string where = "tools[" + std::to_string(idx) + "]";
  if (!t.is_object()) throw bad_field(where + ": must be an object");
  const json& f = t.contains("function") ? t["function"] : t;
  tool_spec out;
  out.def.name = f.value("name", "");
  if (out.def.name.empty()) throw bad_field(where + ".function.name: required");
  out.def.description = f.value("description", "");
  out.def.parameters_json = f.contains("parameters") ? f["parameters"].dump() : R"({"type":"object","properties":{}})";
  if (t.contains("execution") && !t["execution"].is_null()) {
    const json& e = t["execution"];
    if (!e.is_object() || e.value("type", "") != "http") throw bad_field(where + ".execution.type: must be \"http\"");
    http_execution h;
    h.url = e.value("url", "");
    if (h.url.rfind("http://", 0) != 0 && h.url.rfind("https://", 0) != 0)
      throw bad_field(where + ".execution.url: must be an http(s) URL");
    h.timeout_ms = get_or<int32_t>(e, "timeout_ms", h.timeout_ms);
    h.max_retries = get_or<int32_t>(e, "max_retries", h.max_retries);
    h.max_response_bytes = get_or<int64_t>(e, "max_response_bytes", h.max_response_bytes);
    if (h.timeout_ms <= 0 || h.timeout_ms > 600000) throw bad_field(where + ".execution.timeout_ms: 1..600000");
    if (h.max_retries < 0 || h.max_retries > 10) throw bad_field(where + ".execution.max_retries: 0..10");
    out.http = h;
  }
  return out;
}

}  // namespace

std::optional<agent_spec> parse_agent_spec(const std::string& request_json, std::string* error) {
  json j = json::parse(request_json, nullptr, false);
  if (!j.is_object()) {
    *error = "request: must be a JSON object";
    return std::nullopt;
  }
  try {
    agent_spec s;
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
      throw bad_field("messages: a non-empty array is required");
    for (size_t i = 0; i < j["messages"].size(); ++i) s.messages.push_back(parse_message(j["messages"][i], i));
    if (j.contains("tools")) {
      if (!j["tools"].is_array()) throw bad_field("tools: must be an array");
      for (size_t i = 0; i < j["tools"].size(); ++i) s.tools.push_back(parse_tool(j["tools"][i], i));
    }
    if (j.contains("tool_choice")) {
      const json& c = j["tool_choice"];
      if (c.is_string()) {
        std::string v = c.get<std::string>();
        if (v == "auto") s.choice.mode = tool_choice_mode::automatic;
        else if (v == "none") s.choice.mode = tool_choice_mode::none;
        else if (v == "required") s.choice.mode = tool_choice_mode::required;
        else throw bad_field("tool_choice: auto, none, required or {\"type\":\"function\",...}");
      } else if (c.is_object()) {
        const json& f = c.contains("function") ? c["function"] : c;
        s.choice.mode = tool_choice_mode::named;
        s.choice.name = f.value("name", "");
        if (!s.find_tool(s.choice.name)) throw bad_field("tool_choice: no tool named '" + s.choice.name + "'");
      } else
        throw bad_field("tool_choice: wrong type");
      if (s.choice.mode == tool_choice_mode::required && s.tools.empty()) throw bad_field("tool_choice: requires tools");
    }
    s.parallel_tool_calls = get_or<bool>(j, "parallel_tool_calls", true);
    s.json_ws = get_or<std::string>(j, "json_whitespace", "spaced") == "free" ? json_whitespace::free : json_whitespace::spaced;
    s.tool_choice_every_turn = get_or<bool>(j, "tool_choice_every_turn", false);
    s.finish_on_client_tools = j.contains("client_tool_calls") && j["client_tool_calls"] == "finish";
    s.keep_kv = get_or<bool>(j, "keep_kv", false);
    if (j.contains("response_format") && j["response_format"].is_object()) {
      const json& rf = j["response_format"];
      if (rf.value("type", "") == "json_schema") {
        const json& js = rf.contains("json_schema") ? rf["json_schema"] : json::object();
        s.response_schema_json = js.contains("schema") ? js["schema"].dump() : "{}";
      } else if (rf.value("type", "") == "json_object")
        s.response_schema_json = R"({"type":"object"})";
    }
    s.sampling.temperature = get_or<float>(j, "temperature", 0.0f);
    s.sampling.top_p = get_or<float>(j, "top_p", 1.0f);
    s.sampling.top_k = get_or<int32_t>(j, "top_k", 0);
    s.sampling.seed = get_or<uint64_t>(j, "seed", 0);
    s.max_turns = get_or<int32_t>(j, "max_turns", s.max_turns);
    s.max_output_tokens = get_or<int64_t>(j, "max_output_tokens", s.max_output_tokens);
    s.max_tokens_per_turn = get_or<int32_t>(j, "max_tokens_per_turn", s.max_tokens_per_turn);
    s.deadline_seconds = get_or<double>(j, "deadline_seconds", 0.0);
    s.priority = get_or<std::string>(j, "priority", "normal");
    s.stream_tokens = get_or<bool>(j, "stream_tokens", false);
    if (j.contains("prediction") && j["prediction"].is_object()) {  // validated by the API
      const json& c = j["prediction"].contains("content") ? j["prediction"]["content"] : json();
      if (c.is_string()) s.prediction = c.get<std::string>();
      else if (c.is_array())
        for (auto& part : c) if (part.is_object()) s.prediction += part.value("text", "");
    }
    if (j.contains("stop")) {
      if (j["stop"].is_string()) s.stop.push_back(j["stop"].get<std::string>());
      else if (j["stop"].is_array())
        for (auto& x : j["stop"]) if (x.is_string()) s.stop.push_back(x.get<std::string>());
    }
    if (s.max_turns < 1 || s.max_turns > 1000) throw bad_field("max_turns: 1..1000");
    if (s.max_output_tokens < 1) throw bad_field("max_output_tokens: must be >= 1");
    if (s.max_tokens_per_turn < 1) throw bad_field("max_tokens_per_turn: must be >= 1");
    if (s.deadline_seconds < 0) throw bad_field("deadline_seconds: must be >= 0");
    if (s.priority != "high" && s.priority != "normal" && s.priority != "low")
      throw bad_field("priority: high, normal or low");
    return s;
  } catch (const bad_field& e) {
    *error = e.what();
  } catch (const json::exception& e) {
    *error = std::string("request: ") + e.what();
  }
  return std::nullopt;
}

}  // namespace agentq::worker
