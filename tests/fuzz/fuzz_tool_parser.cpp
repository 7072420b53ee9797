// libFuzzer target: tool-call parsing of arbitrary generated text, one-shot and
// streamed in chunks, for every family: never crashes; streamed content is a
// prefix of the text (Harmony: of the final content); valid calls name a known tool with object arguments.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat/tool_parser.h"
#include "json/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  using namespace agentq;
  chat::tool_parser_options o;
  o.family = static_cast<chat::template_family>(data[0] % 12);  // every family, plain .. harmony
  o.choice.mode = static_cast<tool_choice_mode>((data[0] >> 3) % 4);
  o.choice.name = "search";
  o.parallel_tool_calls = data[0] & 0x80;
  o.tools = {{"search", "s", R"({"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"]})"},
             {"add", "a", R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"number"}}})"}};
  size_t chunk = 1 + data[1] % 7;
  std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  chat::parse_result r = chat::parse_tool_calls(o, text);
  for (const auto& c : r.message.tool_calls) {
    if (c.name != "search" && c.name != "add") std::abort();
    auto v = json::parse(c.arguments_json);
    if (!v || !v->is_object()) std::abort();
  }
  chat::tool_parser p(o);
  std::string streamed;
  for (size_t i = 0; i < text.size(); i += chunk) streamed += p.feed(text.substr(i, chunk));
  chat::parse_result r2 = p.finish();
  if (o.family == chat::template_family::harmony) {
    // Harmony streams message bodies, not the text: what streamed begins the final content.
    size_t a = 0, b = streamed.size();
    while (a < b && std::isspace(static_cast<unsigned char>(streamed[a]))) a++;
    while (b > a && std::isspace(static_cast<unsigned char>(streamed[b - 1]))) b--;
    if (!r2.message.content.starts_with(streamed.substr(a, b - a))) std::abort();
  } else if (text.substr(0, streamed.size()) != streamed) {
    std::abort();
  }
  if (r2.message.tool_calls.size() != r.message.tool_calls.size()) std::abort();
  return 0;
}
