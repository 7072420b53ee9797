// OpenAI-style JSON ⇄ chat_message / tool_def (see messages_json.h).
#include "chat/messages_json.h"

#include <stdexcept>

#include "json/json.h"

namespace agentq::chat {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string get_string(const json::value& o, const char* key, const std::string& where, bool required) {
  const json::value* v = o.find(key);
  if (!v || v->is_null()) {
    if (required) fail(where + ": missing \"" + key + "\"");
    return {};
  }
  if (!v->is_string()) fail(where + ": \"" + key + "\" must be a string");
  return v->as_string();
}

}  // namespace

std::optional<std::vector<chat_message>> messages_from_json(std::string_view text, std::string* error) {
  try {
    json::value doc = json::parse_or_throw(text);
    if (!doc.is_array()) fail("messages must be a JSON array");
    std::vector<chat_message> out;
    for (size_t i = 0; i < doc.items().size(); i++) {
      const json::value& m = doc.items()[i];
      std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) fail(where + " must be an object");
      chat_message msg;
      std::string r = get_string(m, "role", where, true);
      if (r == "system" || r == "developer") msg.role = role::system;
      else if (r == "user") msg.role = role::user;
      else if (r == "assistant") msg.role = role::assistant;
      else if (r == "tool" || r == "ipython") msg.role = role::tool;
      else fail(where + ": unknown role \"" + r + "\"");
      msg.content = get_string(m, "content", where, false);
      msg.tool_call_id = get_string(m, "tool_call_id", where, false);
      msg.name = get_string(m, "name", where, false);
      if (const json::value* calls = m.find("tool_calls"); calls && !calls->is_null()) {
        if (!calls->is_array()) fail(where + ": tool_calls must be an array");
        for (size_t j = 0; j < calls->items().size(); j++) {
          const json::value& c = calls->items()[j];
          std::string cw = where + ".tool_calls[" + std::to_string(j) + "]";
          if (!c.is_object()) fail(cw + " must be an object");
          const json::value* fn = c.find("function");
          const json::value& f = fn && fn->is_object() ? *fn : c;
          tool_call tc;
          tc.id = get_string(c, "id", cw, false);
          tc.name = get_string(f, "name", cw, true);
          const json::value* args = f.find("arguments");
          if (!args || args->is_null()) tc.arguments_json = "{}";
          else if (args->is_string()) tc.arguments_json = args->as_string();
          else tc.arguments_json = args->dump();
          msg.tool_calls.push_back(std::move(tc));
        }
      }
      out.push_back(std::move(msg));
    }
    return out;
  } catch (const json::parse_error& e) {
    if (error) *error = "messages: JSON parse error at offset " + std::to_string(e.offset) + ": " + e.what();
  } catch (const std::exception& e) {
    if (error) *error = e.what();
  }
  return std::nullopt;
}

std::optional<std::vector<tool_def>> tools_from_json(std::string_view text, std::string* error) {
  try {
    json::value doc = json::parse_or_throw(text);
    if (!doc.is_array()) fail("tools must be a JSON array");
    std::vector<tool_def> out;
    for (size_t i = 0; i < doc.items().size(); i++) {
      const json::value& t = doc.items()[i];
      std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) fail(where + " must be an object");
      const json::value* fn = t.find("function");
      const json::value& f = fn && fn->is_object() ? *fn : t;
      tool_def d;
      d.name = get_string(f, "name", where, true);
      d.description = get_string(f, "description", where, false);
      const json::value* p = f.find("parameters");
      if (p && !p->is_null()) {
        if (!p->is_object()) fail(where + ": parameters must be an object");
        d.parameters_json = p->dump();
      }
      out.push_back(std::move(d));
    }
    return out;
  } catch (const json::parse_error& e) {
    if (error) *error = "tools: JSON parse error at offset " + std::to_string(e.offset) + ": " + e.what();
  } catch (const std::exception& e) {
    if (error) *error = e.what();
  }
  return std::nullopt;
}

std::string messages_to_json(const std::vector<chat_message>& messages) {
  static const char* names[] = {"system", "user", "assistant", "tool"};
  auto a = json::value::make_array();
  for (const auto& m : messages) {
    auto o = json::value::make_object();
    o.push_back("role", json::value::make_string(names[static_cast<int>(m.role)]));
    o.push_back("content", json::value::make_string(m.content));
    if (!m.tool_calls.empty()) {
      auto calls = json::value::make_array();
      for (const auto& c : m.tool_calls) {
        auto f = json::value::make_object();
        f.push_back("name", json::value::make_string(c.name));
        f.push_back("arguments", json::value::make_string(c.arguments_json));
        calls.push_back(json::value::make_object({{"id", json::value::make_string(c.id)},
                                                  {"type", json::value::make_string("function")},
                                                  {"function", std::move(f)}}));
      }
      o.push_back("tool_calls", std::move(calls));
    }
    if (!m.tool_call_id.empty()) o.push_back("tool_call_id", json::value::make_string(m.tool_call_id));
    if (!m.name.empty()) o.push_back("name", json::value::make_string(m.name));
    a.push_back(std::move(o));
  }
  return a.dump();
}

}  // namespace agentq::chat
