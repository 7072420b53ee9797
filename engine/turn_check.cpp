// check_turn (turn_check.h): what engine::validate and model_header::validate both check.
#include "turn_check.h"

#include "grammar/constraint.h"

namespace agentq {

namespace {

bool has_tool(const std::vector<tool_def>& tools, const std::string& name) {
  for (const auto& t : tools)
    if (t.name == name) return true;
  return false;
}

std::optional<std::string> check_schema(std::string_view schema_json) {
  if (schema_json.empty()) return std::nullopt;
  auto r = grammar::compile_schema(schema_json);
  if (!r.value) return r.error;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_turn(const turn_request& r, chat::template_family family, const tokenizer& tok,
                                      int32_t n_ctx, size_t* n_tokens, turn_prompt* prompt,
                                      const std::function<bool(size_t)>& room) {
  if (r.messages.empty()) return std::string("messages: at least one message is required");
  if (r.max_tokens < 0) return std::string("max_tokens: must be >= 0");
  for (size_t i = 0; i < r.tools.size(); ++i) {
    if (r.tools[i].name.empty()) return "tools[" + std::to_string(i) + "].name: empty";
    if (auto e = check_schema(r.tools[i].parameters_json)) return "tools[" + std::to_string(i) + "].parameters: " + *e;
  }
  if (r.choice.mode == tool_choice_mode::named && !has_tool(r.tools, r.choice.name))
    return "tool_choice: no tool named '" + r.choice.name + "'";
  if ((r.choice.mode == tool_choice_mode::required || r.choice.mode == tool_choice_mode::named) && r.tools.empty())
    return std::string("tool_choice: requires tools");
  if (auto e = check_schema(r.response_schema_json)) return "response_format: " + *e;
  const auto& tr = chat::traits(family);
  std::string text = chat::render(family, r.messages, r.tools, true) + r.assistant_prefix;
  // NOTE: a check alone (no prompt wanted) that the prompt fits needs no exact count where an upper
  // bound fits: tokenizing every submit and Batch line was ~20 % of a Batch upload's CPU. A prompt
  // the bound does not clear is counted exactly, so a refusal's message is the same.
  if (!prompt && n_tokens) {
    const size_t bound = tok.max_tokens(text, !tr.bos_in_text, true);
    if ((n_ctx <= 0 || bound <= size_t(n_ctx)) && (!room || room(bound))) {
      *n_tokens = bound;
      return std::nullopt;
    }
  }
  std::vector<token_id> ids = tok.encode(text, !tr.bos_in_text, true);
  const size_t n = ids.size();
  if (n_ctx > 0 && n > size_t(n_ctx))
    return "messages: the prompt has " + std::to_string(n) + " tokens, the model's context is " +
           std::to_string(n_ctx);
  if (n_tokens) *n_tokens = n;
  if (prompt) {
    prompt->text = std::move(text);
    prompt->ids = std::move(ids);
  }
  return std::nullopt;
}

std::string kv_room_message(size_t n_tokens) {
  return "messages: the prompt needs more KV memory than the engine has (" + std::to_string(n_tokens) + " tokens)";
}

}  // namespace agentq
