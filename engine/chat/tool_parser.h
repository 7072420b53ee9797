// Tool-call parsing from generated text, per template family: a streaming
// detector (content before a call streams, the call is buffered) and a strict
// final parse that checks JSON, tool names and argument schemas. Every problem
// becomes an error string the agent loop can show the model; nothing throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"
#include "chat/chat.h"

namespace agentq::chat {

struct parse_result {
  chat_message message;              // role assistant: content and/or tool_calls
  std::vector<std::string> errors;   // empty when every call parsed and validated
};

struct tool_parser_options {
  template_family family = template_family::chatml;
  std::vector<tool_def> tools;
  tool_choice choice;                // none: no call is recognised, all text is content
  bool parallel_tool_calls = true;   // false: a second call is an error
  uint64_t id_seed = 0;              // call ids derive from (seed, call index)
};

// Deterministic call id: "call_" + 16 hex digits from (seed, idx). Mistral needs
// exactly 9 alphanumerics: it gets 9 hex digits instead.
std::string make_call_id(template_family family, uint64_t seed, uint64_t idx);

class tool_parser {
 public:
  explicit tool_parser(tool_parser_options options);
  ~tool_parser();

  // Feed the next piece of generated text. Returns the text that is certainly
  // content and may be streamed now (a possible partial marker is held back).
  std::string feed(std::string_view piece);
  // A call marker (or, for Llama 3, a leading '{') has been seen: everything
  // from call_start() on is call text, not content.
  bool in_call() const { return in_call_; }
  size_t call_start() const { return call_start_; }   // byte offset into text()
  const std::string& text() const { return text_; }    // everything fed so far
  // Final parse of everything fed. Also enforces tool_choice: required/named
  // with no call is an error. truncated: the output was cut (token limit), so trailing
  // text that could still have become a call opening (held back by feed, e.g. "<tool_c")
  // never will: it is dropped, not made content.
  parse_result finish(bool truncated = false) const;

 private:
  std::string feed_harmony();  // feed() for Harmony: only final/commentary bodies stream

  tool_parser_options opt_;
  std::string text_;
  size_t n_streamed_ = 0;
  size_t n_visible_ = 0;  // harmony: bytes of content streamed
  bool in_call_ = false;
  size_t call_start_ = 0;
};

// The texts that open a tool call in a family's output: "<tool_call>", Mistral's
// "[TOOL_CALLS]", Llama 3's "<|python_tag|>" (the last two are control tokens in the
// real vocabularies: the engine spells them out for detection).
std::vector<std::string> call_markers(template_family family);

// Where a tool call opens in generated text: a marker at or after `from`, or, for
// Llama 3, a `{"name"` object that starts the turn (only whitespace before it).
// Qwen3/SmolLM3: never inside an unclosed <think> block.
struct call_open {
  size_t at = std::string_view::npos;  // byte offset of the opening; npos when none
  size_t hold = 0;                      // trailing bytes that may still become an opening
};
call_open find_call_open(template_family family, std::string_view text, size_t from);

std::unique_ptr<tool_parser> make_tool_parser(template_family family, std::vector<tool_def> tools,
                                              tool_choice choice, bool parallel_tool_calls = true,
                                              uint64_t id_seed = 0);

// One-shot parse of a whole generated turn.
parse_result parse_tool_calls(const tool_parser_options& options, std::string_view text);

}  // namespace agentq::chat
