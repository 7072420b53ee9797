// DeepSeek-R1 distills (shared/templates/deepseek-ai-DeepSeek-R1-Distill-{Qwen-32B,Llama-8B}.jinja):
// "<｜begin▁of▁sentence｜>" + system, "<｜User｜>...", "<｜Assistant｜>...<｜end▁of▁sentence｜>",
// tool results as "<｜tool▁outputs▁begin｜>...". Tools are our extension (below).
#include "chat/chat.h"
#include "chat/render_internal.h"

namespace agentq::chat {

namespace {
const char* k_bos = "<｜begin▁of▁sentence｜>";
const char* k_eos = "<｜end▁of▁sentence｜>";
}  // namespace

// NOTE: the templates print no tool definitions, and their own call syntax
// (<｜tool▁calls▁begin｜>...```json...) cannot be rendered faithfully: the Llama
// distill's template concatenates the arguments object to a string (jinja2 raises
// for HF-style dict arguments) and neither distill was tuned on it. So tools use
// the extension the other tool-less families use: the Qwen tool block after the
// system prompt, calls as <tool_call>{json}</tool_call> in the assistant's content
// (what traits() and the tool-call grammar expect). Everything else follows the
// template, quirks included: only the last system message is printed (at the start);
// an assistant turn right after tool results gets no <｜Assistant｜> (the template
// closes the outputs and prints the reply straight after), and no generation prompt
// follows tool results; "<｜tool▁outputs▁begin｜>" is printed for the first tool
// result of the whole conversation only; reasoning before the last </think> of an
// assistant turn is dropped. qwen_variant: the Qwen-32B template closes the think
// block in the generation prompt ("<think>\n</think>", its enable_thinking undefined).
// APPEND-ONLY BREAK (deepseek-r1*): the system prompt is the last system message
// wherever it is; an appended system message rewrites the start.
std::string render_deepseek_r1(const std::vector<chat_message>& m, const std::vector<tool_def>& tools, bool gen,
                               bool qwen_variant) {
  std::string system;
  for (const auto& x : m)
    if (x.role == role::system) system = x.content;
  if (!tools.empty()) system += (system.empty() ? "" : "\n\n") + detail::tools_block(tools);
  std::string out = std::string(k_bos) + system;
  bool is_tool = false, output_first = true;
  for (const auto& x : m) {
    if (x.role == role::user) {
      is_tool = false;
      out += "<｜User｜>" + x.content;
    } else if (x.role == role::assistant) {
      if (is_tool) {
        out += "<｜tool▁outputs▁end｜>" + x.content + detail::calls_text(x, "\n") + k_eos;
        is_tool = false;
      } else {
        std::string c = x.content;
        if (size_t p = c.rfind("</think>"); p != std::string::npos) c = c.substr(p + 8);
        out += "<｜Assistant｜>" + c + detail::calls_text(x, "\n") + k_eos;
      }
    } else if (x.role == role::tool) {
      is_tool = true;
      out += output_first ? "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" : "\n<｜tool▁output▁begin｜>";
      out += x.content + "<｜tool▁output▁end｜>";
      output_first = false;
    }
  }
  if (is_tool) out += "<｜tool▁outputs▁end｜>";
  if (gen && !is_tool) out += qwen_variant ? "<｜Assistant｜><think>\n</think>" : "<｜Assistant｜><think>\n";
  return out;
}

}  // namespace agentq::chat
