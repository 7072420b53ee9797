// The request checks a turn needs before it runs, shared by engine::validate (which adds the KV
// room check of its pool) and model_header::validate (a control plane without weights).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

namespace agentq {

// Messages present, tools named with compiling schemas, tool_choice consistent, the response
// schema compiling, and the rendered prompt (+ assistant prefix) within n_ctx tokens (n_ctx 0:
// unbounded). nullopt when fine (*n_tokens = the prompt's tokens), else a message naming the field.
// prompt (when given): the rendered text (+ assistant prefix) and its token ids, for a caller that
// runs the turn next (engine::submit), so the prompt is rendered and tokenized once.
// Without prompt, *n_tokens may be an upper bound (tokenizer::max_tokens) instead of the count: one
// within n_ctx for which room (the caller's KV check, when given) holds; else the exact count.
struct turn_prompt {
  std::string text;
  std::vector<token_id> ids;
};
std::optional<std::string> check_turn(const turn_request& r, chat::template_family family, const tokenizer& tok,
                                      int32_t n_ctx, size_t* n_tokens, turn_prompt* prompt = nullptr,
                                      const std::function<bool(size_t)>& room = {});

// engine::validate's refusal of a prompt its KV pool cannot hold (a control plane's too, #28).
std::string kv_room_message(size_t n_tokens);

}  // namespace agentq
