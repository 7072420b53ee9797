// Tool-call parsing per family (see tool_parser.h). Syntax accepted:
//   chatml, qwen3, hermes, phi3, smollm3, gemma, plain: <tool_call>{"name":..,"arguments":{..}}</tool_call>
//       (any whitespace inside the tags; a missing closing tag at the very end is tolerated)
//   llama3: the turn is one or more {"name":..,"parameters":{..}} objects separated by ';'
//       or whitespace, optionally after <|python_tag|>; a turn not starting with '{' is content
//   mistral: [TOOL_CALLS][{"name":..,"arguments":{..},"id"?:..}, ...] (or a single object), or
//       the bare array when every element is an object with a "name" ([TOOL_CALLS] is a
//       control token that decodes to "")
//   harmony: messages "[<|start|>assistant]<|channel|>CH[ to=functions.NAME][ <|constrain|>json]<|message|>BODY"
//       ended by <|end|>, <|call|> or <|return|> (the first one's "<|start|>assistant" is the
//       generation prompt); the recipient may also follow the role ("assistant to=functions.NAME",
//       as the template prints calls). A message to functions.NAME is a call with BODY as its
//       arguments; final (and commentary without a recipient) bodies are the content; analysis
//       is reasoning, not content. Text with no <|message|> at all is content as it is.
// "arguments" and "parameters" are both accepted everywhere; arguments given as a
// JSON string holding an object are unwrapped. Valid calls land in
// message.tool_calls with arguments re-printed in Python json.dumps spacing (what
// the templates print back); invalid ones only produce an error.
#include "chat/tool_parser.h"

#include <algorithm>
#include <cstdio>

#include "grammar/constraint.h"
#include "grammar/schema.h"
#include "json/json.h"

namespace agentq::chat {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) a++;
  while (b > a && is_space(s[b - 1])) b--;
  return std::string(s.substr(a, b - a));
}

// Length of a trailing incomplete UTF-8 sequence (0 if the text ends cleanly).
size_t incomplete_utf8_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char c = s[n - back];
    if ((c & 0xC0) == 0x80) continue;   // continuation: keep looking for the lead byte
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

struct raw_call {
  json::value obj;
  std::string where;   // "call 1" for messages
};

class extractor;
std::string harmony_messages(std::string_view text, extractor* ex);

class extractor {
 public:
  extractor(const tool_parser_options& o, parse_result& r) : opt_(o), r_(r) {}

  void run(std::string_view text) {
    std::string content;
    switch (opt_.family) {
      case template_family::llama3: content = llama3(text); break;
      case template_family::mistral: content = mistral(text); break;
      case template_family::harmony: content = harmony_messages(text, this); break;
      default: content = tags(text); break;
    }
    r_.message.role = role::assistant;
    r_.message.content = trim(content);
    finish_calls();
  }

 private:
  void error(std::string e) { r_.errors.push_back(std::move(e)); }

  // Parse one JSON call text; malformed → error.
  void add_call_text(std::string_view body) {
    std::string err;
    std::string where = "tool call " + std::to_string(raw_.size() + n_bad_ + 1);
    auto v = json::parse(trim(body), &err);
    if (!v) {
      n_bad_++;
      error(where + ": malformed JSON: " + err);
      return;
    }
    add_call_value(std::move(*v), where);
  }
  void add_call_value(json::value v, std::string where) {
    if (!v.is_object()) {
      n_bad_++;
      error(where + ": expected a JSON object {\"name\": ..., \"arguments\": {...}}");
      return;
    }
    raw_.push_back({std::move(v), std::move(where)});
  }

  std::string tags(std::string_view text) {
    const std::string open = "<tool_call>", close = "</tool_call>";
    size_t search_from = 0;
    if (opt_.family == template_family::qwen3 || opt_.family == template_family::smollm3) {
      size_t think_end = text.rfind("</think>");
      if (think_end != std::string_view::npos) search_from = think_end + 8;
    }
    std::string content(text.substr(0, search_from));
    size_t pos = search_from;
    for (;;) {
      size_t a = text.find(open, pos);
      if (a == std::string_view::npos) {
        content.append(text.substr(pos));
        break;
      }
      content.append(text.substr(pos, a - pos));
      size_t body = a + open.size();
      size_t b = text.find(close, body);
      if (b == std::string_view::npos) {
        add_call_text(text.substr(body));   // cut off at the end of the turn
        break;
      }
      add_call_text(text.substr(body, b - body));
      pos = b + close.size();
    }
    return content;
  }

  std::string llama3(std::string_view text) {
    std::string t = trim(text);
    std::string_view rest = t;
    std::string before;   // content before <|python_tag|>
    size_t tag = t.find("<|python_tag|>");
    if (tag != std::string::npos) {
      before = t.substr(0, tag);
      rest.remove_prefix(tag + 14);
    }
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    if (rest.empty() || rest.front() != '{') return tag != std::string::npos ? before + std::string(rest) : t;
    // One or more objects separated by ';' or whitespace: split at top-level object ends.
    std::vector<std::string_view> parts;
    size_t depth = 0, start = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < rest.size(); i++) {
      char c = rest[i];
      if (in_str) {
        if (esc) esc = false;
        else if (c == '\\') esc = true;
        else if (c == '"') in_str = false;
        continue;
      }
      if (c == '"') in_str = true;
      else if (c == '{' || c == '[') { if (depth++ == 0 && c == '{') start = i; }
      else if ((c == '}' || c == ']') && depth > 0) {
        if (--depth == 0) parts.push_back(rest.substr(start, i + 1 - start));
      } else if (depth == 0 && !is_space(c) && c != ';') {
        error("tool call: unexpected text after the JSON call: \"" + std::string(rest.substr(i, 40)) + "\"");
        break;
      }
    }
    if (depth != 0) {
      error("tool call 1: malformed JSON: unterminated object");
      return before;
    }
    // A lone object without "name" is a JSON answer, not a call.
    if (parts.size() == 1) {
      auto v = json::parse(parts[0]);
      if (v && v->is_object() && !v->find("name")) return t;
    }
    for (auto p : parts) add_call_text(p);
    return before;
  }

  std::string mistral(std::string_view text) {
    const std::string marker = "[TOOL_CALLS]";
    size_t a = text.find(marker);
    std::string content, body;
    if (a != std::string_view::npos) {
      content = text.substr(0, a);
      body = trim(text.substr(a + marker.size()));
    } else {
      // A bare call array (the [TOOL_CALLS] control token decodes to ""): only when
      // it parses as an array of objects that all have a "name".
      body = trim(text);
      auto v = body.starts_with("[") ? json::parse(body) : std::nullopt;
      bool calls = v && v->is_array() && !v->items().empty();
      if (calls) for (const auto& x : v->items()) calls = calls && x.is_object() && x.find("name");
      if (!calls) return std::string(text);
    }
    std::string err;
    // The array may be followed by junk: parse the longest valid prefix ending at a ']'.
    std::optional<json::value> v = json::parse(body, &err);
    if (!v) {
      for (size_t end = body.rfind(']'); end != std::string::npos && end > 0; end = body.rfind(']', end - 1)) {
        auto w = json::parse(std::string_view(body).substr(0, end + 1));
        if (w) {
          error("tool call: unexpected text after the tool call array");
          v = std::move(w);
          break;
        }
      }
    }
    if (!v) {
      error("tool call 1: malformed JSON: " + err);
      return content;
    }
    if (v->is_array()) {
      for (size_t i = 0; i < v->items().size(); i++) add_call_value(v->items()[i], "tool call " + std::to_string(i + 1));
    } else {
      add_call_value(std::move(*v), "tool call 1");
    }
    return content;
  }

  // A Harmony call: {"name": name, "arguments": body}.
  void add_harmony_call(const std::string& name, std::string_view body) {
    std::string err;
    std::string where = "tool call " + std::to_string(raw_.size() + n_bad_ + 1) + " ('" + name + "')";
    auto v = json::parse(trim(body), &err);
    if (!v) {
      n_bad_++;
      error(where + ": malformed JSON arguments: " + err);
      return;
    }
    auto o = json::value::make_object();
    o.push_back("name", json::value::make_string(name));
    o.push_back("arguments", std::move(*v));
    raw_.push_back({std::move(o), std::move(where)});
  }
  friend std::string harmony_messages(std::string_view, extractor*);

  const tool_def* find_tool(const std::string& name) const {
    for (const auto& t : opt_.tools) if (t.name == name) return &t;
    return nullptr;
  }

  void finish_calls() {
    const auto& choice = opt_.choice;
    uint64_t idx = 0;
    for (auto& rc : raw_) {
      const json::value& o = rc.obj;
      const json::value* name = o.find("name");
      if (!name || !name->is_string()) {
        error(rc.where + ": missing \"name\" (a string)");
        continue;
      }
      const std::string& n = name->as_string();
      const tool_def* tool = find_tool(n);
      if (!tool) {
        std::string avail;
        for (const auto& t : opt_.tools) avail += (avail.empty() ? "" : ", ") + t.name;
        error(rc.where + ": unknown tool '" + n + "' (available: " + (avail.empty() ? "none" : avail) + ")");
        continue;
      }
      if (choice.mode == tool_choice_mode::named && n != choice.name) {
        error(rc.where + ": tool_choice requires '" + choice.name + "', got '" + n + "'");
        continue;
      }
      const json::value* args = o.find("arguments");
      if (!args) args = o.find("parameters");
      json::value a = args ? *args : json::value::make_object();
      if (a.is_string()) {   // arguments as a JSON string
        std::string err;
        auto inner = json::parse(a.as_string(), &err);
        if (!inner) {
          error(rc.where + " ('" + n + "'): arguments string is not JSON: " + err);
          continue;
        }
        a = std::move(*inner);
      }
      if (!a.is_object()) {
        error(rc.where + " ('" + n + "'): arguments must be a JSON object");
        continue;
      }
      if (!tool->parameters_json.empty()) {
        std::string err;
        auto schema = grammar::parse_schema(tool->parameters_json, &err);
        if (!schema) {
          error("tool '" + n + "' has an unusable parameters schema: " + err);
          continue;
        }
        auto errs = grammar::validate(*schema, a);
        if (!errs.empty()) {
          for (const auto& e : errs) error(rc.where + " ('" + n + "'): invalid arguments: " + e);
          continue;
        }
      }
      tool_call call;
      call.name = n;
      call.arguments_json = a.dump_py();
      const json::value* id = o.find("id");
      if (opt_.family == template_family::mistral && id && id->is_string() && id->as_string().size() == 9) call.id = id->as_string();
      else call.id = make_call_id(opt_.family, opt_.id_seed, idx);
      idx++;
      r_.message.tool_calls.push_back(std::move(call));
    }
    size_t n_calls = r_.message.tool_calls.size();
    if (!opt_.parallel_tool_calls && n_calls > 1) {
      error("parallel tool calls are disabled: got " + std::to_string(n_calls) + " calls, kept the first");
      r_.message.tool_calls.resize(1);
    }
    if ((choice.mode == tool_choice_mode::required || choice.mode == tool_choice_mode::named) && raw_.empty() &&
        n_bad_ == 0)
      error("tool_choice requires a tool call, but the reply contains none");
  }

  const tool_parser_options& opt_;
  parse_result& r_;
  std::vector<raw_call> raw_;
  size_t n_bad_ = 0;
};

// Whether text is Harmony-structured: it starts (after whitespace) with a "<|" marker, or with
// " to=" (a recipient continuing the generation prompt's role, "<|start|>assistant to=...").
// partial: also text that may still become " to=".
bool harmony_structured(std::string_view text, bool partial = false) {
  constexpr std::string_view to = " to=";
  if (text.starts_with(to) || (partial && !text.empty() && to.starts_with(text))) return true;
  size_t a = 0;
  while (a < text.size() && is_space(text[a])) a++;
  return text.substr(a).starts_with("<|");
}

// Harmony's messages in generated text (see the top of this file): returns the content (final
// and recipient-less commentary bodies, in order); calls go to ex (when given). Text that does
// not start with a marker, or has no <|message|>, is returned as it is.
std::string harmony_messages(std::string_view text, extractor* ex) {
  static constexpr std::string_view k_msg = "<|message|>", k_start = "<|start|>";
  if (!harmony_structured(text) || text.find(k_msg) == std::string_view::npos) return std::string(text);
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t m = text.find(k_msg, pos);
    if (m == std::string_view::npos) break;  // a header cut off at the end: nothing to show
    std::string_view header = text.substr(pos, m - pos);
    if (const size_t s = header.rfind(k_start); s != std::string_view::npos) header.remove_prefix(s + k_start.size());
    const size_t body_at = m + k_msg.size();
    size_t end = text.size(), next = text.size();
    for (std::string_view e : {std::string_view("<|end|>"), std::string_view("<|call|>"), std::string_view("<|return|>"),
                               k_start}) {
      const size_t p = text.find(e, body_at);
      if (p < end) {
        end = p;
        next = e == k_start ? p : p + e.size();
      }
    }
    const std::string_view body = text.substr(body_at, end - body_at);
    std::string channel, recipient;
    if (const size_t c = header.find("<|channel|>"); c != std::string_view::npos) {
      size_t a = c + 11, b = a;
      while (b < header.size() && !is_space(header[b]) && header[b] != '<') b++;
      channel = header.substr(a, b - a);
    }
    if (const size_t t = header.find("to="); t != std::string_view::npos) {
      size_t a = t + 3, b = a;
      while (b < header.size() && !is_space(header[b]) && header[b] != '<') b++;
      recipient = header.substr(a, b - a);
    }
    if (!recipient.empty()) {
      if (ex && recipient.starts_with("functions.")) ex->add_harmony_call(recipient.substr(10), body);
    } else if (channel != "analysis") {
      content.append(body);
    }
    pos = next;
  }
  return content;
}

}  // namespace

std::vector<std::string> call_markers(template_family family) {
  switch (family) {
    case template_family::llama3: return {"<|python_tag|>"};
    case template_family::mistral: return {"[TOOL_CALLS]"};
    default: return {traits(family).tool_call_open};
  }
}

namespace {
// Longest suffix of text[from..] that is a proper prefix of marker.
size_t partial_suffix(std::string_view text, size_t from, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size() - from); k > 0; k--)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}
// Llama 3: the turn starts (after whitespace) with '{' ws* "\"name\"". at/hold as call_open.
call_open llama3_json_open(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && is_space(text[i])) i++;
  if (i == text.size()) return {std::string_view::npos, text.size()};   // only whitespace: hold it
  if (text[i] != '{') return {};
  size_t j = i + 1;
  while (j < text.size() && is_space(text[j])) j++;
  const std::string_view key = "\"name\"";
  const std::string_view rest = text.substr(j);
  if (rest.size() >= key.size()) return rest.substr(0, key.size()) == key ? call_open{i, 0} : call_open{};
  return key.substr(0, rest.size()) == rest ? call_open{std::string_view::npos, text.size()} : call_open{};
}
}  // namespace

call_open find_call_open(template_family family, std::string_view text, size_t from) {
  from = std::min(from, text.size());
  call_open best;
  if (family == template_family::qwen3 || family == template_family::smollm3) {
    // NOTE: a marker inside <think>...</think> is reasoning, not a call (as finish() parses it).
    size_t open = text.rfind("<think>"), close = text.rfind("</think>");
    if (open != std::string_view::npos && (close == std::string_view::npos || close < open)) return best;
    if (close != std::string_view::npos) from = std::max(from, close + 8);
  }
  if (family == template_family::llama3) best = llama3_json_open(text);
  if (best.at != std::string_view::npos) return best;
  for (const std::string& m : call_markers(family)) {
    if (m.empty()) continue;
    const size_t at = text.find(m, from);
    if (at != std::string_view::npos) {
      if (at < best.at) best.at = at;
    } else {
      best.hold = std::max(best.hold, partial_suffix(text, from, m));
    }
  }
  if (best.at != std::string_view::npos) best.hold = 0;
  return best;
}

std::string make_call_id(template_family family, uint64_t seed, uint64_t idx) {
  uint64_t h = splitmix64(seed ^ splitmix64(idx + 1));
  char buf[32];
  if (family == template_family::mistral) {
    std::snprintf(buf, sizeof buf, "%09llx", static_cast<unsigned long long>(h & 0xfffffffffull));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "call_%016llx", static_cast<unsigned long long>(h));
  return buf;
}

parse_result parse_tool_calls(const tool_parser_options& options, std::string_view text) {
  parse_result r;
  r.message.role = role::assistant;
  if (options.choice.mode == tool_choice_mode::none || options.tools.empty()) {
    // NOTE: Harmony's reasoning and headers are never content, with or without tools.
    r.message.content = options.family == template_family::harmony ? trim(harmony_messages(text, nullptr)) : std::string(text);
    if (options.choice.mode == tool_choice_mode::required || options.choice.mode == tool_choice_mode::named)
      r.errors.push_back("tool_choice requires a tool call, but no tools were given");
    return r;
  }
  try {
    extractor(options, r).run(text);
  } catch (const std::exception& e) {   // NOTE: defensive; the extractor reports through errors
    r.errors.push_back(std::string("tool call parse failed: ") + e.what());
  }
  return r;
}

tool_parser::tool_parser(tool_parser_options options) : opt_(std::move(options)) {}
tool_parser::~tool_parser() = default;

// Harmony streaming: the content of the complete message bodies so far (a trailing "<|..." that
// may still become a marker is held back); a call's header stops the stream.
std::string tool_parser::feed_harmony() {
  const std::string_view t = text_;
  const bool tools_on = opt_.choice.mode != tool_choice_mode::none && !opt_.tools.empty();
  if (tools_on) {
    if (const size_t at = t.find(" to=functions."); at != std::string_view::npos) {
      in_call_ = true;
      const size_t s = t.rfind("<|start|>", at), c = t.rfind("<|channel|>", at);
      call_start_ = s != std::string_view::npos ? s : c != std::string_view::npos ? c : 0;
      return {};
    }
  }
  size_t hold = 0;
  if (const size_t lt = t.rfind('<'); lt != std::string_view::npos && t.size() - lt <= 12 &&
                                      t.find('>', lt) == std::string_view::npos)
    hold = t.size() - lt;
  const std::string_view seen = t.substr(0, t.size() - hold);
  size_t a = 0;
  while (a < seen.size() && is_space(seen[a])) a++;
  // NOTE: as finish() decides (harmony_messages): structured text shows only message bodies, and
  // nothing until its first <|message|> (without one, the whole text is the content at the end).
  const bool structured = harmony_structured(seen, true) || (hold > 0 && a == seen.size());
  std::string visible;
  if (!structured) visible = seen;
  else if (seen.find("<|message|>") != std::string_view::npos) visible = harmony_messages(seen, nullptr);
  visible.resize(visible.size() - incomplete_utf8_tail(visible));
  if (visible.size() <= n_visible_) return {};
  std::string out = visible.substr(n_visible_);
  n_visible_ = visible.size();
  return out;
}

std::string tool_parser::feed(std::string_view piece) {
  text_.append(piece);
  if (in_call_) return {};
  if (opt_.family == template_family::harmony) return feed_harmony();
  size_t end = text_.size();
  if (opt_.choice.mode != tool_choice_mode::none && !opt_.tools.empty()) {
    const call_open o = find_call_open(opt_.family, text_, n_streamed_);
    if (o.at != std::string::npos) {
      in_call_ = true;
      call_start_ = o.at;
      end = o.at;
    } else {
      end = std::max(n_streamed_, end - o.hold);   // a possible partial opening is held back
    }
  }
  end -= incomplete_utf8_tail(std::string_view(text_).substr(n_streamed_, end - n_streamed_));
  std::string out = text_.substr(n_streamed_, end - n_streamed_);
  n_streamed_ = end;
  return out;
}

parse_result tool_parser::finish(bool truncated) const {
  if (!truncated || in_call_ || opt_.choice.mode == tool_choice_mode::none || opt_.tools.empty())
    return parse_tool_calls(opt_, text_);
  const size_t hold = find_call_open(opt_.family, text_, n_streamed_).hold;
  return parse_tool_calls(opt_, std::string_view(text_).substr(0, text_.size() - hold));
}

std::unique_ptr<tool_parser> make_tool_parser(template_family family, std::vector<tool_def> tools, tool_choice choice,
                                              bool parallel_tool_calls, uint64_t id_seed) {
  tool_parser_options o;
  o.family = family;
  o.tools = std::move(tools);
  o.choice = std::move(choice);
  o.parallel_tool_calls = parallel_tool_calls;
  o.id_seed = id_seed;
  return std::make_unique<tool_parser>(std::move(o));
}

}  // namespace agentq::chat
