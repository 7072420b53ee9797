// Constrained decoding across one chat turn in which the model may, but need not,
// call a tool (tool_choice auto), optionally with a JSON Schema for the final answer.
// The turn starts free (or, with a response schema, "deciding"); a tool-call opening
// switches the tool-call grammar on, and the call's end switches it off again.
// See docs/chat_and_grammar.md ("Lazy constraints") for the decision points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agentq/engine.h"
#include "chat/chat.h"
#include "grammar/constraint.h"

namespace agentq::grammar {

struct turn_constraint_options {
  chat::template_family family = chat::template_family::chatml;
  std::vector<tool_def> tools;       // the declared tools (non-empty)
  bool parallel_tool_calls = true;   // false: the turn ends when the first call closes
  std::string response_schema_json;  // "" = a non-tool answer is free text
  json_whitespace json_ws = json_whitespace::spaced;  // in the call JSON and the schema answer
  // Control tokens that spell a call opening (Mistral [TOOL_CALLS], Llama <|python_tag|>)
  // and their text: the vocabulary's pieces are "" for them (never produced as text).
  std::vector<std::pair<token_id, std::string>> markers;
};

enum class turn_phase {
  free,      // unconstrained: watching for a call opening
  deciding,  // response schema on, nothing but whitespace or part of an opening yet
  think,     // Qwen3/SmolLM3 <think> block under a response schema: unconstrained
  answer,    // the model began a non-tool answer: constrained to the response schema
  call,      // a tool call opened: the tool-call grammar (names and argument schemas)
  done,      // the turn must end (a call closed with parallel calls off)
};
const char* to_string(turn_phase p);

class turn_constraint {
 public:
  // nullptr with *error when the tools or the response schema do not compile.
  static std::unique_ptr<turn_constraint> make(turn_constraint_options options,
                                               std::shared_ptr<const vocab_index> vocab, std::string* error);
  ~turn_constraint();

  // Allowed tokens now (bit id%32 of mask[id/32]); false when the output is
  // unconstrained this step (mask untouched).
  bool fill_mask(std::vector<uint32_t>& mask);
  // Advance by a sampled token that does not end the turn (markers count as their text).
  void accept(token_id id);
  // Advance by text (an assistant prefill, or a token's bytes). Never fails: text that
  // no constraint can take leaves the rest of the turn unconstrained (the tool-call
  // parser then reports what is wrong).
  void accept_text(std::string_view bytes);
  // The turn must end now (call closed with parallel calls off; answer complete with
  // no possible continuation).
  bool is_finished() const;
  turn_phase phase() const { return phase_; }
  // Everything accepted, markers spelled out.
  const std::string& text() const { return text_; }

 private:
  turn_constraint() = default;
  void start_free(size_t at);
  void start_deciding(bool with_think, bool with_answer, size_t at);
  void start_call(size_t at);
  void after_call(size_t at);
  bool advance();

  turn_constraint_options opt_;
  std::shared_ptr<const vocab_index> vocab_;
  std::shared_ptr<const grammar> open_grammar_, open_after_call_grammar_;
  turn_phase phase_ = turn_phase::free;
  std::string text_;
  size_t scan_from_ = 0;                      // where the call-opening search resumes
  size_t phase_start_ = 0;                    // text_ offset where the current phase began
  size_t fed_ = 0;                            // text_ bytes the current phase has taken
  bool eos_ok_ = false;                       // deciding after a call: ending the turn is allowed
  bool with_think_ = false;                   // deciding: a <think> block may still open
  std::unique_ptr<token_constraint> open_;    // deciding: whitespace + an opening (or <think>)
  std::unique_ptr<token_constraint> answer_;  // deciding / answer: the response schema
  std::unique_ptr<token_constraint> call_;    // call: the tool-call grammar
  std::vector<uint32_t> part_;
};

}  // namespace agentq::grammar
