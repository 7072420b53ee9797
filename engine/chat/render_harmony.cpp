// GPT-OSS Harmony (shared/templates/openai-gpt-oss-120b.jinja): "<|start|>ROLE<|message|>...<|end|>"
// messages, a fixed system message, the user's system prompt and the tools (as a TypeScript
// namespace) in a developer message, calls as "<|start|>assistant to=functions.NAME<|channel|>
// commentary json<|message|>{args}<|call|>", results from "functions.NAME to=assistant".
#include <string>

#include "chat/chat.h"
#include "chat/render_internal.h"
#include "json/json.h"

namespace agentq::chat {

namespace {

using json::value;

// Jinja truthiness of a JSON value (none/absent: false).
bool truthy(const value* v) {
  if (!v || v->is_null()) return false;
  if (v->is_bool()) return v->as_bool();
  if (v->is_string()) return !v->as_string().empty();
  if (v->is_array()) return !v->items().empty();
  if (v->is_object()) return !v->members().empty();
  return v->number_text() != "0" && v->number_text() != "0.0";
}
bool is_type(const value& spec, const char* t) {
  const value* v = spec.find("type");
  return v && v->is_string() && v->as_string() == t;
}
// A value printed by Jinja's string concatenation / join: strings raw, the rest as JSON.
std::string raw(const value& v) { return v.is_string() ? v.as_string() : v.dump_py(); }
bool in_required(const value* required, const std::string& name) {
  if (!required || !required->is_array()) return false;
  for (const auto& r : required->items())
    if (r.is_string() && r.as_string() == name) return true;
  return false;
}

// The template's render_typescript_type macro, whitespace quirks included (the "\n" and 16
// spaces before a nested property's type and after " | " in oneOf come from the template's own
// layout). NOTE: its oneOf branch means to print "any" for unions with object variants, but the
// flag it sets inside the loop does not outlive the loop (Jinja scoping), so it never does: as here.
std::string ts_type(const value& spec) {
  const value* nullable = spec.find("nullable");
  if (is_type(spec, "array")) {
    const value* items = spec.find("items");
    std::string s;
    if (truthy(items)) {
      if (is_type(*items, "string")) s = "string[]";
      else if (is_type(*items, "number") || is_type(*items, "integer")) s = "number[]";
      else if (is_type(*items, "boolean")) s = "boolean[]";
      else {
        const std::string inner = ts_type(*items);
        s = inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]";
      }
    } else {
      s = "any[]";
    }
    return truthy(nullable) ? s + " | null" : s;
  }
  if (const value* t = spec.find("type"); t && t->is_array() && !t->items().empty()) {
    std::string s;
    for (size_t i = 0; i < t->items().size(); ++i) s += (i ? " | " : "") + raw(t->items()[i]);
    return s;
  }
  if (const value* one = spec.find("oneOf"); truthy(one) && one->is_array()) {
    std::string s;
    const auto& vs = one->items();
    for (size_t i = 0; i < vs.size(); ++i) {
      s += ts_type(vs[i]);
      if (const value* d = vs[i].find("description"); truthy(d)) s += "// " + raw(*d);
      if (const value* d = vs[i].find("default")) s += std::string(20, ' ') + "// default: " + d->dump_py();
      if (i + 1 < vs.size()) s += " | \n";
    }
    return s;
  }
  if (is_type(spec, "string")) {
    if (const value* e = spec.find("enum"); truthy(e) && e->is_array()) {
      std::string s = "\"";
      for (size_t i = 0; i < e->items().size(); ++i) s += (i ? "\" | \"" : "") + raw(e->items()[i]);
      return s + "\"";
    }
    return truthy(nullable) ? "string | null" : "string";
  }
  if (is_type(spec, "number") || is_type(spec, "integer")) return "number";
  if (is_type(spec, "boolean")) return "boolean";
  if (is_type(spec, "object")) {
    const value* props = spec.find("properties");
    if (!truthy(props) || !props->is_object()) return "object";
    const value* required = spec.find("required");
    std::string s = "{\n";
    const auto& ms = props->members();
    for (size_t i = 0; i < ms.size(); ++i) {
      s += ms[i].first + (in_required(required, ms[i].first) ? "" : "?") + ": \n" + std::string(16, ' ') +
           ts_type(ms[i].second);
      if (i + 1 < ms.size()) s += ", ";
    }
    return s + "}";
  }
  return "any";
}

// render_tool_namespace("functions", tools).
std::string tool_namespace(const std::vector<tool_def>& tools) {
  std::string s = "## functions\n\nnamespace functions {\n\n";
  for (const auto& t : tools) {
    s += "// " + t.description + "\n";
    s += "type " + t.name + " = ";
    auto params = t.parameters_json.empty() ? std::optional<value>() : json::parse(t.parameters_json);
    const value* props = params ? params->find("properties") : nullptr;
    if (!truthy(props) || !props->is_object()) {
      s += "() => any;\n\n";
      continue;
    }
    const value* required = params->find("required");
    s += "(_: {\n";
    for (const auto& [name, spec] : props->members()) {
      if (const value* d = spec.find("description"); truthy(d)) s += "// " + raw(*d) + "\n";
      s += name + (in_required(required, name) ? "" : "?") + ": " + ts_type(spec);
      if (const value* d = spec.find("default")) {
        if (truthy(spec.find("enum")))
          s += ", // default: " + raw(*d);
        else if (truthy(spec.find("oneOf")))
          s += "// default: " + raw(*d);
        else
          s += ", // default: " + d->dump_py();
      }
      s += ",\n";
    }
    s += "}) => any;\n\n";
  }
  return s + "} // namespace functions";
}

// tool_call.arguments|tojson of the (dict) arguments: Python json.dumps spacing.
std::string args_json(const tool_call& c) {
  if (c.arguments_json.empty()) return "{}";
  auto v = json::parse(c.arguments_json);
  return v ? v->dump_py() : c.arguments_json;
}

}  // namespace

// NOTE: as the template, with these choices where it leaves something open:
//  * "Current date:" prints harmony_date_string (the template's strftime_now), for byte-identical prompts;
//    model_identity, reasoning_effort ("medium") and builtin_tools keep the template's defaults;
//  * an assistant message's content is printed as its analysis (reasoning) before its call when
//    no later assistant message without calls follows, as the template does; a final answer's
//    reasoning is never kept (the parser does not put it in content);
//  * extension: the template prints only a message's first call ("we assume max 1 tool call per
//    message") and names every following result after it. Here each call is printed as its own
//    call message and each result is named after the call its tool_call_id answers (the last call
//    when none matches), which for one call per message is the template's text exactly.
//  * only a first system (or developer) message is printed, as the template's developer message;
//    later system messages are dropped (the template has no place for them).
// APPEND-ONLY BREAK (harmony): a last assistant answer without a generation prompt ends in
// <|return|>, in <|end|> once anything follows; a call message's content (its reasoning) is
// dropped once a later final answer exists.
std::string render_harmony(const std::vector<chat_message>& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n";
  out += "Knowledge cutoff: 2024-06\nCurrent date: " + std::string(harmony_date_string) + "\n\n";
  out += "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  if (!tools.empty()) out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";
  size_t first = 0;
  std::string developer;
  if (!m.empty() && m[0].role == role::system) {
    developer = m[0].content;
    first = 1;
  }
  if (!developer.empty() || !tools.empty()) {
    out += "<|start|>developer<|message|>";
    if (!developer.empty()) out += "# Instructions\n\n" + developer + "\n\n";
    if (!tools.empty()) out += "# Tools\n\n" + tool_namespace(tools);
    out += "<|end|>";
  }
  std::string last_call;  // the template's last_tool_call.name ("": none)
  const chat_message* last_calls = nullptr;
  for (size_t i = first; i < m.size(); ++i) {
    const chat_message& x = m[i];
    if (x.role == role::assistant && !x.tool_calls.empty()) {
      bool future_final = false;
      for (size_t j = i + 1; j < m.size(); ++j) future_final = future_final || (m[j].role == role::assistant && m[j].tool_calls.empty());
      if (!x.content.empty() && !future_final)
        out += "<|start|>assistant<|channel|>analysis<|message|>" + x.content + "<|end|>";
      for (const auto& c : x.tool_calls)
        out += "<|start|>assistant to=functions." + c.name + "<|channel|>commentary json<|message|>" + args_json(c) + "<|call|>";
      last_call = x.tool_calls.back().name;
      last_calls = &x;
    } else if (x.role == role::assistant) {
      const bool last = i + 1 == m.size();
      out += "<|start|>assistant<|channel|>final<|message|>" + x.content + (last && !gen ? "<|return|>" : "<|end|>");
      if (!(last && !gen)) last_call.clear();
    } else if (x.role == role::tool) {
      std::string name = last_call;
      if (last_calls)
        for (const auto& c : last_calls->tool_calls)
          if (!x.tool_call_id.empty() && c.id == x.tool_call_id) name = c.name;
      if (name.empty()) name = x.name;  // NOTE: the template raises here (a result without a call)
      out += "<|start|>functions." + name + " to=assistant<|channel|>commentary<|message|>" +
             value::make_string(x.content).dump_py() + "<|end|>";
    } else if (x.role == role::user) {
      out += "<|start|>user<|message|>" + x.content + "<|end|>";
    }
  }
  if (gen) out += "<|start|>assistant";
  return out;
}

}  // namespace agentq::chat
