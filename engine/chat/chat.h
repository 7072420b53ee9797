// Chat prompt formats: turn OpenAI-style messages + tools into the exact prompt
// text a model's own chat template would produce, and recognise which format a
// model uses from its Jinja template. Tool-call parsing is in chat/tool_parser.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"

namespace agentq::chat {

// One prompt format per family of chat templates (see docs in chat/render.cpp).
enum class template_family {
  plain,    // base models without a template: "System: ...\nUser: ...\nAssistant: ..."
  chatml,   // Qwen2.5-Instruct: <|im_start|>role ... <|im_end|>, <tool_call> JSON
  hermes,   // NousResearch Hermes 3 tool_use: ChatML with a fixed tool system prompt
  qwen3,    // Qwen3: ChatML with <think> reasoning, tools in the system turn
  llama3,   // Llama 3.1 / 3.2 Instruct: headers, tools in the first user turn, ipython role
  mistral,  // Mistral Nemo: [INST], [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]
  phi3,     // Phi-3 / 3.5 mini: <|user|> ... <|end|> (no native tools: our extension)
  phi4,     // Phi-4 (14B): <|im_start|>role<|im_sep|> ... <|im_end|> (no native tools: our extension)
  phi4_mini,  // Phi-4-mini: <|role|>content<|end|>, no newlines (tools: our extension, as phi3)
  smollm3,  // SmolLM3 (Unsloth template): ChatML with a metadata system header
  gemma,    // Gemma 2 / 3 instruct: <start_of_turn>user|model ... <end_of_turn> (no native tools: our extension)
  deepseek_r1,       // DeepSeek-R1 (Llama distill template): <｜User｜> ... <｜Assistant｜><think>\n (tools: our extension)
  deepseek_r1_qwen,  // DeepSeek-R1 Qwen distill template: as deepseek_r1, generation prompt "<think>\n</think>"
  harmony,  // GPT-OSS Harmony: <|start|>role<|channel|>ch<|message|>...<|end|>, calls "to=functions.NAME" ... <|call|>
};

const char* to_string(template_family f);
// "chatml", "qwen2.5", "hermes", "qwen3", "llama3", "llama3.1", "llama3.2", "mistral",
// "nemo", "phi3", "phi3.5", "phi4", "phi-4", "phi4-mini", "phi-4-mini", "smollm3", "gemma", "gemma2", "gemma3", "deepseek-r1",
// "deepseek-r1-distill-llama", "deepseek-r1-distill-qwen", "harmony", "gpt-oss", "plain"; nullopt when unknown.
std::optional<template_family> family_from_name(std::string_view name);
// Recognise a model's Jinja chat template by distinctive substrings: plain when the
// model has no template (base models); nullopt ("unknown") when it has one that no
// family matches. NOTE: unknown is not plain on purpose: rendering such a model's
// chats as plain text would silently give it a prompt it was never trained on.
std::optional<template_family> detect_family(std::string_view chat_template_jinja);
// The name the engine reports (model_desc::chat_family) for an unrecognised template.
inline constexpr const char* unknown_family_name = "unknown";

// What the rest of the engine needs to know about a family.
struct family_traits {
  // The rendered prompt starts with the BOS token's text ("<|begin_of_text|>", "<s>"):
  // tokenize with add_special=false, parse_special=true. When false, the caller
  // adds BOS itself if the model wants one (add_special=true).
  bool bos_in_text = false;
  std::string bos_text;                    // "" when !bos_in_text
  // Strings that end an assistant turn (besides the model's EOS/EOT token).
  std::vector<std::string> stop_strings;
  // Marker that opens a tool call in generated text ("<tool_call>", "[TOOL_CALLS]").
  // Llama 3 has none: a call is a bare JSON object at the start of the turn.
  std::string tool_call_open;
  std::string tool_call_close;             // "</tool_call>" or ""
};
const family_traits& traits(template_family f);
// Texts of the control tokens a family's output is structured by (Harmony's <|channel|>,
// <|message|>, ...; none for the others). In a vocabulary where they are control tokens (whose
// pieces are empty), the engine spells them out in generated text and in the grammar's pieces,
// so the parser sees the structure and a call's grammar can produce it.
const std::vector<std::string>& control_texts(template_family f);

// Fixed values where a template inserts something variable. NOTE: deterministic
// on purpose (byte-identical prompts keep the prefix cache hitting).
inline constexpr const char* llama3_date_string = "26 Jul 2024";  // Llama 3.1's own default
inline constexpr const char* harmony_date_string = "2025-08-05";  // GPT-OSS's release (Harmony's "Current date")

// Render the prompt. Never fails: where a real template would raise (Llama 3
// with tools but no user message, Mistral out-of-order roles, >1 Llama 3 call),
// it renders the closest sensible text (documented per family in render.cpp).
// tool_call.arguments_json that is not valid JSON is inserted verbatim.
std::string render(template_family family, const std::vector<chat_message>& messages,
                   const std::vector<tool_def>& tools, bool add_generation_prompt);

// The tool list as the OpenAI/HF-style JSON array
// [{"type":"function","function":{"name","description","parameters"}}] (compact).
std::string tools_json(const std::vector<tool_def>& tools);

}  // namespace agentq::chat
