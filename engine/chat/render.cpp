// Prompt rendering per template family: hand-written equivalents of the real
// Jinja chat templates in shared/templates/ (byte-identical for what they cover),
// plus family detection and traits.
//
// Conventions (what the HF templates receive from us):
//  * tools are {"type": "function", "function": {"name", "description", "parameters"}}
//    and print with Python json.dumps separators (json::value::dump_py), as `tojson` does;
//  * tool_call.arguments_json is a JSON object text. Templates that print it with
//    `tojson` only (Qwen2.5 chatml, Llama 3, Mistral) get it parsed and re-printed
//    with Python separators; templates with an `is string` branch (Qwen3, Hermes)
//    get it verbatim, which keeps the model's own bytes (and its KV cache) intact;
//  * dates: Llama 3.x prints "26 Jul 2024" (3.1's default; 3.2's strftime_now is
//    not used, for deterministic prompts);
//  * Qwen3 and SmolLM3: enable_thinking is left undefined (Qwen3: no empty think
//    block in the generation prompt; SmolLM3: "/think" mode unless the system
//    prompt says "/no_think").
//
// Append-only (render(k messages) is a prefix of render(k+1 messages), with the
// generation prompt when message k+1 is the assistant's) holds for every family
// except where noted at each renderer ("APPEND-ONLY BREAK").
#include <cstdio>

#include "chat/chat.h"
#include "chat/render_internal.h"
#include "json/json.h"

namespace agentq::chat {

const char* to_string(template_family f) {
  switch (f) {
    case template_family::plain: return "plain";
    case template_family::chatml: return "chatml";
    case template_family::hermes: return "hermes";
    case template_family::qwen3: return "qwen3";
    case template_family::llama3: return "llama3";
    case template_family::mistral: return "mistral";
    case template_family::phi3: return "phi3";
    case template_family::phi4: return "phi4";
    case template_family::phi4_mini: return "phi4-mini";
    case template_family::smollm3: return "smollm3";
    case template_family::gemma: return "gemma";
    case template_family::deepseek_r1: return "deepseek-r1";
    case template_family::deepseek_r1_qwen: return "deepseek-r1-distill-qwen";
    case template_family::harmony: return "harmony";
  }
  return "?";
}

std::optional<template_family> family_from_name(std::string_view n) {
  if (n == "plain" || n == "none") return template_family::plain;
  if (n == "chatml" || n == "qwen2" || n == "qwen2.5" || n == "qwen") return template_family::chatml;
  if (n == "hermes" || n == "hermes3") return template_family::hermes;
  if (n == "qwen3") return template_family::qwen3;
  if (n == "llama3" || n == "llama3.1" || n == "llama3.2" || n == "llama-3") return template_family::llama3;
  if (n == "mistral" || n == "nemo" || n == "mistral-nemo") return template_family::mistral;
  if (n == "phi3" || n == "phi3.5" || n == "phi-3") return template_family::phi3;
  if (n == "phi4" || n == "phi-4") return template_family::phi4;
  if (n == "phi4-mini" || n == "phi-4-mini") return template_family::phi4_mini;
  if (n == "smollm3") return template_family::smollm3;
  if (n == "gemma" || n == "gemma2" || n == "gemma3") return template_family::gemma;
  if (n == "deepseek-r1" || n == "deepseek-r1-distill-llama") return template_family::deepseek_r1;
  if (n == "deepseek-r1-distill-qwen") return template_family::deepseek_r1_qwen;
  if (n == "harmony" || n == "gpt-oss") return template_family::harmony;
  return std::nullopt;
}

std::optional<template_family> detect_family(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (t.empty()) return template_family::plain;
  if (has("json_to_python_type") || has("You are a function calling AI model")) return template_family::hermes;
  if (has("<|channel|>") && has("<|start|>")) return template_family::harmony;
  if (has("SmolLM") || has("/no_think")) return template_family::smollm3;
  if (has("<|im_start|>") && has("<|im_sep|>")) return template_family::phi4;  // ChatML with <|im_sep|>
  if (has("<|im_start|>") && (has("reasoning_content") || has("</think>"))) return template_family::qwen3;
  if (has("<|im_start|>")) return template_family::chatml;
  if (has("<|start_header_id|>")) return template_family::llama3;
  if (has("[INST]") || has("[TOOL_CALLS]")) return template_family::mistral;
  // Phi-4-mini writes every role as '<|' + role + '|>' and has a <|tool|> ... <|/tool|> system block.
  if (has("<|/tool|>") && has("<|end|>")) return template_family::phi4_mini;
  if (has("<|user|>") && has("<|end|>")) return template_family::phi3;
  if (has("<start_of_turn>")) return template_family::gemma;
  // NOTE: the Qwen distill's template differs from DeepSeek's own (the Llama distill's) in its
  // generation prompt; it is the one that mentions enable_thinking.
  if (has("<｜Assistant｜>") && has("<｜User｜>"))
    return has("enable_thinking") ? template_family::deepseek_r1_qwen : template_family::deepseek_r1;
  return std::nullopt;
}

const family_traits& traits(template_family f) {
  static const family_traits plain{false, "", {"\nUser:", "\nSystem:", "\nTool:"}, "<tool_call>", "</tool_call>"};
  static const family_traits chatml{false, "", {"<|im_end|>"}, "<tool_call>", "</tool_call>"};
  static const family_traits hermes{true, "<|begin_of_text|>", {"<|im_end|>"}, "<tool_call>", "</tool_call>"};
  static const family_traits llama3{true, "<|begin_of_text|>", {"<|eot_id|>", "<|eom_id|>"}, "", ""};
  static const family_traits mistral{true, "<s>", {"</s>"}, "[TOOL_CALLS]", ""};
  static const family_traits phi3{false, "", {"<|end|>", "<|endoftext|>"}, "<tool_call>", "</tool_call>"};
  static const family_traits gemma{true, "<bos>", {"<end_of_turn>"}, "<tool_call>", "</tool_call>"};
  // Harmony: <|return|> ends a final answer and <|call|> a call (both end the turn); <|end|> only a
  // message (an analysis message is followed by more). The call marker is the canonical header's start (the
  // grammar's); the parser also takes the recipient after the role, see tool_parser.cpp.
  static const family_traits harmony{false, "", {"<|return|>", "<|call|>"}, "<|channel|>commentary to=functions.", ""};
  static const family_traits deepseek{true, "<｜begin▁of▁sentence｜>", {"<｜end▁of▁sentence｜>"}, "<tool_call>",
                                      "</tool_call>"};
  switch (f) {
    case template_family::plain: return plain;
    case template_family::chatml:
    case template_family::qwen3:
    case template_family::smollm3: return chatml;
    case template_family::hermes: return hermes;
    case template_family::llama3: return llama3;
    case template_family::mistral: return mistral;
    case template_family::phi3:
    case template_family::phi4_mini: return phi3;
    case template_family::phi4: return chatml;
    case template_family::gemma: return gemma;
    case template_family::deepseek_r1:
    case template_family::deepseek_r1_qwen: return deepseek;
    case template_family::harmony: return harmony;
  }
  return plain;
}

const std::vector<std::string>& control_texts(template_family f) {
  static const std::vector<std::string> none, harmony = {"<|start|>", "<|channel|>", "<|constrain|>", "<|message|>",
                                                         "<|end|>",   "<|call|>",    "<|return|>"};
  return f == template_family::harmony ? harmony : none;
}

// ---------------------------------------------------------------------------
// helpers

namespace {

using msgs = std::vector<chat_message>;

const char* role_name(role r) {
  switch (r) {
    case role::system: return "system";
    case role::user: return "user";
    case role::assistant: return "assistant";
    case role::tool: return "tool";
  }
  return "user";
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string trim(std::string_view s) {   // Jinja |trim (ASCII whitespace)
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) a++;
  while (b > a && is_space(s[b - 1])) b--;
  return std::string(s.substr(a, b - a));
}
std::string strip_chars(std::string_view s, char c, bool left, bool right) {   // str.strip('\n') etc.
  size_t a = 0, b = s.size();
  if (left) while (a < b && s[a] == c) a++;
  if (right) while (b > a && s[b - 1] == c) b--;
  return std::string(s.substr(a, b - a));
}

json::value parse_or_string(std::string_view text, bool empty_is_object) {
  if (text.empty() && empty_is_object) return json::value::make_object();
  auto v = json::parse(text);
  return v ? *v : json::value::make_string(std::string(text));
}

// {"name", "description", "parameters"} of a tool (HF's `tool.function`).
json::value tool_function(const tool_def& t) {
  auto f = json::value::make_object();
  f.push_back("name", json::value::make_string(t.name));
  f.push_back("description", json::value::make_string(t.description));
  json::value params = t.parameters_json.empty()
      ? json::value::make_object({{"type", json::value::make_string("object")}, {"properties", json::value::make_object()}})
      : parse_or_string(t.parameters_json, true);
  f.push_back("parameters", std::move(params));
  return f;
}
json::value tool_object(const tool_def& t) {
  auto o = json::value::make_object();
  o.push_back("type", json::value::make_string("function"));
  o.push_back("function", tool_function(t));
  return o;
}

// arguments printed by `tojson` of the (dict) arguments.
std::string args_py(const tool_call& c) { return parse_or_string(c.arguments_json, true).dump_py(); }
// arguments printed by an `is string` branch: verbatim ("{}" when empty).
std::string args_verbatim(const tool_call& c) { return c.arguments_json.empty() ? "{}" : c.arguments_json; }

const char* qwen_tools_intro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char* qwen_tools_outro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

std::string qwen_tools_block(const std::vector<tool_def>& tools) {
  std::string s = qwen_tools_intro;
  for (const auto& t : tools) {
    s += "\n";
    s += tool_object(t).dump_py();
  }
  s += qwen_tools_outro;
  return s;
}

// ChatML tool results: consecutive tool messages share one user turn.
// APPEND-ONLY BREAK (chatml, qwen3): a tool message closes the turn with
// "<|im_end|>\n" only when it is the last of a run; appending a second tool
// result replaces that "<|im_end|>\n". Append all results of a step together.
void chatml_tool(std::string& out, const msgs& m, size_t i) {
  if (i == 0 || m[i - 1].role != role::tool) out += "<|im_start|>user";
  out += "\n<tool_response>\n" + m[i].content + "\n</tool_response>";
  if (i + 1 == m.size() || m[i + 1].role != role::tool) out += "<|im_end|>\n";
}

// ---------------------------------------------------------------------------
// Qwen2.5-Instruct (chatml)

std::string render_chatml(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  static const char* default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  std::string out;
  bool first_system = !m.empty() && m[0].role == role::system;
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    out += first_system ? m[0].content : default_system;
    out += "\n\n" + qwen_tools_block(tools) + "<|im_end|>\n";
  } else {
    out += "<|im_start|>system\n" + (first_system ? m[0].content : std::string(default_system)) + "<|im_end|>\n";
  }
  for (size_t i = 0; i < m.size(); i++) {
    const auto& x = m[i];
    if (x.role == role::user || (x.role == role::system && i > 0) ||
        (x.role == role::assistant && x.tool_calls.empty())) {
      out += std::string("<|im_start|>") + role_name(x.role) + "\n" + x.content + "<|im_end|>\n";
    } else if (x.role == role::assistant) {
      out += "<|im_start|>assistant";
      if (!x.content.empty()) out += "\n" + x.content;
      for (const auto& c : x.tool_calls)
        out += "\n<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + args_py(c) + "}\n</tool_call>";
      out += "<|im_end|>\n";
    } else if (x.role == role::tool) {
      chatml_tool(out, m, i);
    }
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// ---------------------------------------------------------------------------
// Qwen3
// APPEND-ONLY BREAK (qwen3): reasoning ("<think>...</think>") is kept only for
// assistant turns after the last real user query, and the last assistant turn
// always gets a (possibly empty) think block. So (a) a new user message strips
// the reasoning of earlier assistant turns, and (b) appending a tool result
// after an assistant turn without reasoning drops its empty think block. The
// break is at the first such assistant turn.

std::string render_qwen3(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out;
  bool first_system = !m.empty() && m[0].role == role::system;
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_system) out += m[0].content + "\n\n";
    out += qwen_tools_block(tools) + "<|im_end|>\n";
  } else if (first_system) {
    out += "<|im_start|>system\n" + m[0].content + "<|im_end|>\n";
  }
  size_t last_query = m.empty() ? 0 : m.size() - 1;
  for (size_t k = m.size(); k-- > 0;) {
    const auto& c = m[k].content;
    bool wrapped = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (m[k].role == role::user && !wrapped) { last_query = k; break; }
  }
  for (size_t i = 0; i < m.size(); i++) {
    const auto& x = m[i];
    if (x.role == role::user || (x.role == role::system && i > 0)) {
      out += std::string("<|im_start|>") + role_name(x.role) + "\n" + x.content + "<|im_end|>\n";
    } else if (x.role == role::assistant) {
      std::string content = x.content, reasoning;
      size_t end = x.content.rfind("</think>");
      if (end != std::string::npos) {
        content = strip_chars(std::string_view(x.content).substr(end + 8), '\n', true, false);
        std::string_view before = std::string_view(x.content).substr(0, x.content.find("</think>"));
        std::string r = strip_chars(before, '\n', false, true);
        size_t open = r.rfind("<think>");
        if (open != std::string::npos) r = r.substr(open + 7);
        reasoning = strip_chars(r, '\n', true, false);
      }
      bool last = i + 1 == m.size();
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n" + strip_chars(reasoning, '\n', true, true) + "\n</think>\n\n" +
               strip_chars(content, '\n', true, false);
      } else {
        out += "<|im_start|>assistant\n" + content;
      }
      for (size_t j = 0; j < x.tool_calls.size(); j++) {
        if ((j == 0 && !content.empty()) || j > 0) out += "\n";
        const auto& c = x.tool_calls[j];
        out += "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + args_verbatim(c) + "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (x.role == role::tool) {
      chatml_tool(out, m, i);
    }
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// ---------------------------------------------------------------------------
// Hermes 3 (tool_use template): a fixed system prompt listing the tools with
// Python-style signatures; tool results go in a "tool" turn.
// APPEND-ONLY BREAK (hermes): as chatml, a run of tool results is closed with
// "<|im_end|>" only after its last message, and a tool response that is the
// last message lacks the "\n" it gets once anything follows; a tool-call message
// drops its content (the template prints only the calls).

std::string py_type(const json::value* spec) {
  if (!spec || !spec->is_object()) return "Any";
  const json::value* t = spec->find("type");
  if (t && t->is_string()) {
    const std::string& s = t->as_string();
    if (s == "string") return "str";
    if (s == "number") return "float";
    if (s == "integer") return "int";
    if (s == "boolean") return "bool";
    if (s == "array") return "list[Any]";   // NOTE: the template's `json_spec|items` never finds .type
    if (s == "object") {
      const json::value* ap = spec->find("additionalProperties");
      return ap ? "dict[str, " + py_type(ap) + "]" : "dict";
    }
    return "Any";   // the real template recurses forever on e.g. "null"
  }
  if (t && t->is_array()) {
    std::string s = "Union[";
    for (size_t k = 0; k < t->items().size(); k++) {
      auto sub = json::value::make_object({{"type", t->items()[k]}});
      if (k) s += ",";
      s += py_type(&sub);
    }
    return s + "]";
  }
  return "Any";
}

std::string render_hermes(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out = "<|begin_of_text|><|im_start|>system\n";
  out += "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML "
         "tags. You may call one or more functions to assist with the user query. Don't make assumptions about what "
         "values to plug into functions. Here are the available tools: <tools> ";
  for (size_t k = 0; k < tools.size(); k++) {
    json::value fn = tool_function(tools[k]);
    const json::value* params = fn.find("parameters");
    const json::value* props = params && params->is_object() ? params->find("properties") : nullptr;
    size_t n_props = props && props->is_object() ? props->members().size() : 0;
    out += "{\"type\": \"function\", \"function\": {\"name\": \"" + tools[k].name + "\", \"description\": \"" +
           tools[k].name + "(";
    for (size_t p = 0; p < n_props; p++) {
      if (p) out += ", ";
      out += props->members()[p].first + ": " + py_type(&props->members()[p].second);
    }
    out += ") - " + tools[k].description + "\n\n";
    for (size_t p = 0; p < n_props; p++) {
      if (p == 0) out += "    Args:\n";
      const auto& [name, field] = props->members()[p];
      const json::value* d = field.is_object() ? field.find("description") : nullptr;
      out += "        " + name + "(" + py_type(&field) + "): " + (d && d->is_string() ? trim(d->as_string()) : "");
    }
    out += "\", \"parameters\": ";
    out += n_props == 0 ? "{}" : params->dump_py();
    out += "}";
    if (k + 1 < tools.size()) out += "\n";
  }
  out += " </tools>";
  out += "Use the following pydantic model json schema for each tool call you will make: {\"properties\": {\"name\": "
         "{\"title\": \"Name\", \"type\": \"string\"}, \"arguments\": {\"title\": \"Arguments\", \"type\": "
         "\"object\"}}, \"required\": [\"name\", \"arguments\"], \"title\": \"FunctionCall\", \"type\": \"object\"}}\n";
  out += "For each function call return a json object with function name and arguments within <tool_call></tool_call> "
         "XML tags as follows:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-dict>}\n"
         "</tool_call><|im_end|>\n";
  for (size_t i = 0; i < m.size(); i++) {
    const auto& x = m[i];
    if (x.role == role::user || x.role == role::system || (x.role == role::assistant && x.tool_calls.empty())) {
      out += std::string("<|im_start|>") + role_name(x.role) + "\n" + x.content + "<|im_end|>\n";
    } else if (x.role == role::assistant) {
      out += "<|im_start|>assistant";
      for (const auto& c : x.tool_calls)
        out += "\n<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + args_verbatim(c) + "}\n</tool_call>";
      out += "<|im_end|>\n";
    } else if (x.role == role::tool) {
      bool last = i + 1 == m.size();
      if (i > 0 && m[i - 1].role != role::tool) out += "<|im_start|>tool\n";
      out += "<tool_response>\n" + x.content + (last ? "\n</tool_response>" : "\n</tool_response>\n");
      if (last || m[i + 1].role != role::tool) out += "<|im_end|>";
    }
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// ---------------------------------------------------------------------------
// Llama 3.1 / 3.2 (tools_in_user_message = true, no builtin tools).
// Where the template raises: no user message with tools → the tool block is
// rendered with an empty first user message; more than one tool call → the
// calls are printed in one assistant turn separated by "; " (what our parser
// accepts back).
// APPEND-ONLY BREAK (llama3): with tools, the first message after the system
// prompt is taken as the "first user message" and printed inside the tool
// block, so a conversation with no user message yet is not a prefix of one with
// it. Also the template trims user/assistant content (so generated leading or
// trailing whitespace of an assistant turn is not reproduced).

std::string render_llama3(const msgs& all, const std::vector<tool_def>& tools, bool gen) {
  std::string out = "<|begin_of_text|>";
  size_t start = 0;
  std::string system_message;
  if (!all.empty() && all[0].role == role::system) {
    system_message = trim(all[0].content);
    start = 1;
  }
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  if (!tools.empty()) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\n";
  out += std::string("Today Date: ") + llama3_date_string + "\n\n";
  out += system_message + "<|eot_id|>";
  if (!tools.empty()) {
    std::string first_user;
    if (start < all.size()) first_user = trim(all[start++].content);
    out += "<|start_header_id|>user<|end_header_id|>\n\n";
    out += "Given the following functions, please respond with a JSON for a function call with its proper arguments "
           "that best answers the given prompt.\n\n";
    out += "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
           "value}.Do not use variables.\n\n";
    for (const auto& t : tools) out += tool_object(t).dump_py(4) + "\n\n";
    out += first_user + "<|eot_id|>";
  }
  for (size_t i = start; i < all.size(); i++) {
    const auto& x = all[i];
    if (x.role == role::tool) {
      std::string quoted;
      json::append_quoted(quoted, x.content);   // NOTE: a string `is iterable` in Jinja, so it gets tojson
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + quoted + "<|eot_id|>";
    } else if (!x.tool_calls.empty()) {
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      for (size_t j = 0; j < x.tool_calls.size(); j++) {
        if (j) out += "; ";
        const auto& c = x.tool_calls[j];
        out += "{\"name\": \"" + c.name + "\", \"parameters\": " + args_py(c) + "}";
      }
      out += "<|eot_id|>";
    } else {
      out += std::string("<|start_header_id|>") + role_name(x.role) + "<|end_header_id|>\n\n" + trim(x.content) +
             "<|eot_id|>";
    }
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// ---------------------------------------------------------------------------
// Mistral Nemo. The template has no generation prompt (the [/INST] of the last
// user turn is it). Tool call ids must be 9 alphanumerics; others are mapped to
// 9 hex digits by hashing (the same id maps the same way in calls and results).
// APPEND-ONLY BREAK (mistral): [AVAILABLE_TOOLS] is printed before the *last*
// user message and the system prompt is folded into the last user message
// only while it is the last message. Every new user message therefore moves
// the tool list, and appending anything after a user message removes the
// system prompt from it: the break is at the previous last user message.

std::string mistral_id(const std::string& id) {
  bool ok = id.size() == 9;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
  if (ok) return id;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%09llx", static_cast<unsigned long long>(h & 0xfffffffffull));
  return buf;
}

std::string render_mistral(const msgs& all, const std::vector<tool_def>& tools, bool /*gen*/) {
  size_t start = 0;
  const std::string* system_message = nullptr;
  if (!all.empty() && all[0].role == role::system) {
    system_message = &all[0].content;
    start = 1;
  }
  const chat_message* last_user = nullptr;
  for (size_t i = start; i < all.size(); i++) if (all[i].role == role::user) last_user = &all[i];
  std::string out = "<s>";
  for (size_t i = start; i < all.size(); i++) {
    const auto& x = all[i];
    if (x.role == role::user) {
      // NOTE: the template compares message dicts, so an identical earlier user message matches too.
      if (!tools.empty() && last_user && x.content == last_user->content) {
        out += "[AVAILABLE_TOOLS][";
        for (size_t k = 0; k < tools.size(); k++) {
          const auto& t = tools[k];
          json::value fn = tool_function(t);
          const json::value params = *fn.find("parameters");
          out += "{\"type\": \"function\", \"function\": {\"name\": \"" + t.name + "\", \"description\": \"" +
                 t.description + "\", \"parameters\": ";
          out += params.is_string() ? "\"" + params.as_string() + "\"" : params.dump_py();
          out += "}}";
          out += k + 1 < tools.size() ? ", " : "]";
        }
        out += "[/AVAILABLE_TOOLS]";
      }
      if (i + 1 == all.size() && system_message) out += "[INST]" + *system_message + "\n\n" + x.content + "[/INST]";
      else out += "[INST]" + x.content + "[/INST]";
    } else if (!x.tool_calls.empty()) {
      out += "[TOOL_CALLS][";
      for (size_t j = 0; j < x.tool_calls.size(); j++) {
        const auto& c = x.tool_calls[j];
        out += "{\"name\": \"" + c.name + "\", \"arguments\": " + args_py(c) + ", \"id\": \"" + mistral_id(c.id) + "\"}";
        out += j + 1 < x.tool_calls.size() ? ", " : "]</s>";
      }
    } else if (x.role == role::assistant) {
      out += x.content + "</s>";
    } else if (x.role == role::tool) {
      out += "[TOOL_RESULTS]{\"content\": " + x.content + ", \"call_id\": \"" + mistral_id(x.tool_call_id) +
             "\"}[/TOOL_RESULTS]";
    } else {
      // a system message after the first: the template raises; we print it as a user turn
      out += "[INST]" + x.content + "[/INST]";
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Tool extension shared by families whose template has no tool syntax (plain,
// phi3, smollm3, gemma): calls are "<tool_call>\n{json}\n</tool_call>" in the
// assistant's content, the Qwen/Hermes convention most models were tuned on.

// NOTE: the JSON is printed with Python separators (", ", ": "), as the grammar writes a call
// (json_whitespace::spaced) and the tool parser returns its arguments, so that a committed
// call renders as the bytes the model sampled and the next turn reuses its KV.
std::string calls_as_text(const chat_message& x, const char* sep_inside) {
  std::string s;
  for (size_t j = 0; j < x.tool_calls.size(); j++) {
    const auto& c = x.tool_calls[j];
    if (j || !x.content.empty()) s += "\n";
    auto obj = json::value::make_object();
    obj.push_back("name", json::value::make_string(c.name));
    obj.push_back("arguments", parse_or_string(c.arguments_json, true));
    s += std::string("<tool_call>") + sep_inside + obj.dump_py() + sep_inside + "</tool_call>";
  }
  return s;
}

// ---------------------------------------------------------------------------
// Phi-3.5 mini. The real template covers system/user/assistant; tools are our
// extension: the Qwen tool block appended to the system turn (a system turn is
// created for it), calls as <tool_call> text, results as a user turn holding
// <tool_response>...</tool_response>.
// APPEND-ONLY BREAK (phi3): without a generation prompt the template ends with
// "<|endoftext|>", so only render(k, add_generation_prompt=true) is a prefix
// of render(k+1) (which is what the engine uses).

std::string render_phi3(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out;
  bool first_system = !m.empty() && m[0].role == role::system;
  if (!tools.empty() && !first_system) out += "<|system|>\n" + qwen_tools_block(tools) + "<|end|>\n";
  for (size_t i = 0; i < m.size(); i++) {
    const auto& x = m[i];
    if (x.role == role::system) {
      std::string c = x.content;
      if (i == 0 && !tools.empty()) c += (c.empty() ? "" : "\n\n") + qwen_tools_block(tools);
      if (!c.empty()) out += "<|system|>\n" + c + "<|end|>\n";
    } else if (x.role == role::user) {
      out += "<|user|>\n" + x.content + "<|end|>\n";
    } else if (x.role == role::assistant) {
      out += "<|assistant|>\n" + x.content + calls_as_text(x, "\n") + "<|end|>\n";
    } else {
      out += "<|user|>\n<tool_response>\n" + x.content + "\n</tool_response><|end|>\n";
    }
  }
  out += gen ? "<|assistant|>\n" : "<|endoftext|>";
  return out;
}

// ---------------------------------------------------------------------------
// Phi-4 (microsoft/phi-4's template, tests/unit/engine/data/chat/templates/): ChatML with
// <|im_sep|> after the role and no newlines. It covers system/user/assistant; tools are our
// extension as for phi3 (the Qwen tool block in the system turn, calls as <tool_call> text,
// results as a user turn holding <tool_response>...</tool_response>).

// The turns Phi-4 and Phi-4-mini share (each writes a turn its own way): the Qwen tool block in the
// first system turn (or a system turn of its own), calls as <tool_call> text, results as a user turn
// holding <tool_response>...</tool_response>.
template <class Turn>
void tool_text_turns(const msgs& m, const std::vector<tool_def>& tools, Turn&& turn) {
  bool first_system = !m.empty() && m[0].role == role::system;
  if (!tools.empty() && !first_system) turn("system", qwen_tools_block(tools));
  for (size_t i = 0; i < m.size(); i++) {
    const auto& x = m[i];
    if (x.role == role::system) {
      std::string c = x.content;
      if (i == 0 && !tools.empty()) c += (c.empty() ? "" : "\n\n") + qwen_tools_block(tools);
      turn("system", c);
    } else if (x.role == role::user) {
      turn("user", x.content);
    } else if (x.role == role::assistant) {
      turn("assistant", x.content + calls_as_text(x, "\n"));
    } else {
      turn("user", "<tool_response>\n" + x.content + "\n</tool_response>");
    }
  }
}

std::string render_phi4(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out;
  auto turn = [&](const char* r, const std::string& c) { out += std::string("<|im_start|>") + r + "<|im_sep|>" + c + "<|im_end|>"; };
  tool_text_turns(m, tools, turn);
  if (gen) out += "<|im_start|>assistant<|im_sep|>";
  return out;
}

// Phi-4-mini (microsoft/Phi-4-mini-instruct's template, tests/unit/engine/data/chat/templates/):
// '<|' + role + '|>' + content + '<|end|>' with no newlines; every system message is rendered,
// even empty; without a generation prompt the template ends in eos_token ("<|endoftext|>"). Its
// native tool list (a system message's 'tools' string in <|tool|>...<|/tool|>) comes with no call
// syntax in the template, so tools and calls use the extension phi3 uses (<tool_call> lines,
// results as <tool_response> user turns).
std::string render_phi4_mini(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out;
  auto turn = [&](const char* r, const std::string& c) { out += std::string("<|") + r + "|>" + c + "<|end|>"; };
  tool_text_turns(m, tools, turn);
  out += gen ? "<|assistant|>" : "<|endoftext|>";
  return out;
}

// ---------------------------------------------------------------------------
// SmolLM3 (the Unsloth template in shared/templates). The template prints no
// tools and no tool calls; our extension appends the Qwen tool block to the
// custom instructions and prints calls as <tool_call> text. Tool results are a
// user turn with the raw content, as the template does.

std::string replace_all(std::string s, std::string_view from) {
  for (size_t p; (p = s.find(from)) != std::string::npos;) s.erase(p, from.size());
  return s;
}

std::string render_smollm3(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  bool think = true;
  std::string custom;
  if (!m.empty() && m[0].role == role::system) {
    const std::string& s = m[0].content;
    if (s.find("/no_think") != std::string::npos) think = false;
    else if (s.find("/think") != std::string::npos) think = true;
    custom = replace_all(replace_all(s, "/no_think"), "/think");
    while (!custom.empty() && is_space(custom.back())) custom.pop_back();
  }
  std::string out = "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n";
  out += std::string("Reasoning Mode: ") + (think ? "/think" : "/no_think") + "\n\n## Custom Instructions\n\n";
  if (!custom.empty()) {
    out += custom + "\n\n";
  } else if (think) {
    out += "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
           "thoroughly exploring questions through a systematic thinking process before providing the final precise "
           "and accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, "
           "exploration, reassessment, reflection, backtracking, and iteration to develop well-considered thinking "
           "process. Please structure your response into two main sections: Thought and Solution using the specified "
           "format: <think> Thought section </think> Solution section. In the Thought section, detail your reasoning "
           "process in steps. Each step should include detailed considerations such as analysing questions, "
           "summarizing relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, "
           "refining any errors, and revisiting previous steps. In the Solution section, based on various attempts, "
           "explorations, and reflections from the Thought section, systematically present the final solution that "
           "you deem correct. The Solution section should be logical, accurate, and concise and detail necessary "
           "steps needed to reach the conclusion.\n\n";
  } else {
    out += "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";
  }
  if (!tools.empty()) out += qwen_tools_block(tools) + "\n\n";
  out += "<|im_end|>\n";
  for (const auto& x : m) {
    if (x.role == role::user) {
      out += "<|im_start|>user\n" + x.content + "<|im_end|>\n";
    } else if (x.role == role::assistant) {
      std::string c = strip_chars(x.content, '\n', true, false) + calls_as_text(x, "\n");
      out += think ? "<|im_start|>assistant\n" + c + "<|im_end|>\n"
                   : "<|im_start|>assistant\n<think>\n\n</think>\n" + c + "<|im_end|>\n";
    } else if (x.role == role::tool) {
      out += "<|im_start|>user\n" + x.content + "<|im_end|>\n";
    }
  }
  if (gen) out += think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n";
  return out;
}

// ---------------------------------------------------------------------------
// Gemma 2 / 3 instruct (shared/templates/google-gemma-2-2b-it.jinja): "<bos>", then
// "<start_of_turn>user|model\n" + trimmed content + "<end_of_turn>\n" per message.
// The Gemma 2 template refuses a system message; ours does what Gemma 3's template does
// and puts it (with the Qwen tool block, our tool extension) at the head of the first user
// turn. Calls are <tool_call> text in the model turn; results are a user turn holding
// <tool_response>...</tool_response>.

std::string trim_ws(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string render_gemma(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out = "<bos>";
  std::string prefix;  // system text (and tools) for the first user turn
  size_t i = 0;
  if (!m.empty() && m[0].role == role::system) prefix = m[i++].content;
  if (!tools.empty()) prefix += (prefix.empty() ? "" : "\n\n") + qwen_tools_block(tools);
  if (!prefix.empty()) prefix += "\n\n";
  for (; i < m.size(); i++) {
    const auto& x = m[i];
    std::string text;
    if (x.role == role::assistant) {
      text = "<start_of_turn>model\n" + trim_ws(x.content + calls_as_text(x, "\n"));
    } else {
      const std::string c = x.role == role::tool ? "<tool_response>\n" + x.content + "\n</tool_response>" : x.content;
      text = "<start_of_turn>user\n" + trim_ws(prefix + c);
      prefix.clear();
    }
    out += text + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

// ---------------------------------------------------------------------------
// plain: a transcript for base models (no template). Tools are described in
// the system part; calls are <tool_call>{...}</tool_call> lines.

std::string render_plain(const msgs& m, const std::vector<tool_def>& tools, bool gen) {
  std::string out;
  bool first_system = !m.empty() && m[0].role == role::system;
  if (first_system || !tools.empty()) {
    out += "System:";
    if (first_system && !m[0].content.empty()) out += " " + m[0].content;
    if (!tools.empty()) {
      out += first_system && !m[0].content.empty() ? "\n\n" : " ";
      out += "You can call these tools:\n";
      for (const auto& t : tools) {
        out += "- " + t.name + ": " + t.description + " Arguments schema: " +
               parse_or_string(t.parameters_json, true).dump() + "\n";
      }
      out += "To call a tool, reply with one line per call: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>";
    }
    out += "\n";
  }
  for (size_t i = first_system ? 1 : 0; i < m.size(); i++) {
    const auto& x = m[i];
    switch (x.role) {
      case role::system: out += "System: " + x.content + "\n"; break;
      case role::user: out += "User: " + x.content + "\n"; break;
      case role::tool: out += "Tool: " + x.content + "\n"; break;
      // NOTE: a call-only reply follows "Assistant:" directly, as the model writes it (the
      // generation prompt ends with the colon); text replies keep the space before them.
      case role::assistant:
        out += std::string("Assistant:") + (x.content.empty() && !x.tool_calls.empty() ? "" : " ") + x.content +
               calls_as_text(x, "") + "\n";
        break;
    }
  }
  if (gen) out += "Assistant:";
  return out;
}

}  // namespace

std::string detail::tools_block(const std::vector<tool_def>& tools) { return qwen_tools_block(tools); }
std::string detail::calls_text(const chat_message& m, const char* sep_inside) { return calls_as_text(m, sep_inside); }

std::string tools_json(const std::vector<tool_def>& tools) {
  auto a = json::value::make_array();
  for (const auto& t : tools) a.push_back(tool_object(t));
  return a.dump();
}

std::string render(template_family family, const std::vector<chat_message>& messages,
                   const std::vector<tool_def>& tools, bool add_generation_prompt) {
  switch (family) {
    case template_family::plain: return render_plain(messages, tools, add_generation_prompt);
    case template_family::chatml: return render_chatml(messages, tools, add_generation_prompt);
    case template_family::hermes: return render_hermes(messages, tools, add_generation_prompt);
    case template_family::qwen3: return render_qwen3(messages, tools, add_generation_prompt);
    case template_family::llama3: return render_llama3(messages, tools, add_generation_prompt);
    case template_family::mistral: return render_mistral(messages, tools, add_generation_prompt);
    case template_family::phi3: return render_phi3(messages, tools, add_generation_prompt);
    case template_family::phi4: return render_phi4(messages, tools, add_generation_prompt);
    case template_family::phi4_mini: return render_phi4_mini(messages, tools, add_generation_prompt);
    case template_family::smollm3: return render_smollm3(messages, tools, add_generation_prompt);
    case template_family::gemma: return render_gemma(messages, tools, add_generation_prompt);
    case template_family::deepseek_r1: return render_deepseek_r1(messages, tools, add_generation_prompt, false);
    case template_family::deepseek_r1_qwen: return render_deepseek_r1(messages, tools, add_generation_prompt, true);
    case template_family::harmony: return render_harmony(messages, tools, add_generation_prompt);
  }
  return {};
}

}  // namespace agentq::chat
