// Pieces of chat/render.cpp shared with the renderers kept in their own files
// (render_deepseek.cpp, render_harmony.cpp): the tool extension for templates without tool syntax.
#pragma once

#include <string>
#include <vector>

#include "agentq/engine.h"

namespace agentq::chat::detail {

// The Qwen "# Tools ... <tools>...</tools> ... <tool_call>" instructions for these tools.
std::string tools_block(const std::vector<tool_def>& tools);
// A message's tool calls as "<tool_call>{sep}{json}{sep}</tool_call>" lines (a "\n"
// before each call except a first one that follows no content).
std::string calls_text(const chat_message& m, const char* sep_inside);

}  // namespace agentq::chat::detail

namespace agentq::chat {
// render_deepseek.cpp (both R1-distill templates; qwen_variant: the Qwen-32B one).
std::string render_deepseek_r1(const std::vector<chat_message>& m, const std::vector<tool_def>& tools, bool gen,
                               bool qwen_variant);
// render_harmony.cpp (GPT-OSS).
std::string render_harmony(const std::vector<chat_message>& m, const std::vector<tool_def>& tools, bool gen);
}  // namespace agentq::chat
