// Constrained decoding: a JSON Schema (or a tool-call format) compiled to a
// byte-level pushdown matcher, and a per-sequence token_constraint that gives
// the set of allowed token ids at each step as a bitmask over the vocabulary.
// The engine builds one vocab_index per model and one constraint per request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"
#include "chat/chat.h"

namespace agentq::grammar {

struct grammar;     // compiled byte-level grammar (grammar/matcher.h)
struct vocab_index; // trie over the vocabulary + per-token tables (grammar/constraint.cpp)

struct compile_result {
  std::shared_ptr<const grammar> value;   // null on error
  std::string error;                       // "unsupported JSON Schema keyword 'x' at /p", ...
};

// Compile a JSON Schema (text) for constrained output, with the whitespace ws allows
// (json_whitespace in agentq/engine.h). Cached by schema text and ws (thread-safe); cheap
// to call per request.
compile_result compile_schema(std::string_view schema_json, json_whitespace ws = json_whitespace::spaced);

// Validate a JSON text against a schema text; empty when valid. Parse errors of
// either are reported as errors too.
std::vector<std::string> validate_json(std::string_view schema_json, std::string_view value_json);

// The grammar of a whole tool-call turn for `family` (wrapper markers + {"name": <tool>,
// "arguments": <its schema>}, one call or, if parallel, several). choice: required →
// any tool, named → that tool, automatic → same as required (the engine switches it
// on mid-turn when the detector sees a call start), none → error. The call JSON's whitespace
// follows ws. With parallel calls, a newline after a closed call commits to nothing: the
// output may end there, or open another call (whitespace never forces another call).
compile_result compile_tool_call_grammar(chat::template_family family, const std::vector<tool_def>& tools,
                                         const tool_choice& choice, bool parallel_tool_calls,
                                         json_whitespace ws = json_whitespace::spaced);

// Build once per model: pieces[id] is the token's decoded bytes ("" for tokens
// that can never be produced as text, e.g. control tokens). eos_ids end the output.
std::shared_ptr<const vocab_index> make_vocab_index(const std::vector<std::string>& pieces,
                                                    const std::vector<token_id>& eos_ids);

// Read access for code that drives several constraints over one vocabulary.
int32_t vocab_size(const vocab_index& v);
const std::string& vocab_piece(const vocab_index& v, token_id id);   // "" when out of range
const std::vector<token_id>& vocab_eos_ids(const vocab_index& v);

class token_constraint {
 public:
  token_constraint(std::shared_ptr<const grammar> g, std::shared_ptr<const vocab_index> vocab);
  ~token_constraint();
  token_constraint(const token_constraint&) = delete;
  token_constraint& operator=(const token_constraint&) = delete;

  int32_t n_vocab() const;
  // Allowed tokens now: bit (id % 32) of mask[id / 32]; mask is resized to
  // ceil(n_vocab/32). EOS ids are allowed only when the value is complete.
  void fill_mask(std::vector<uint32_t>& mask);
  // Advance by a sampled token; false (state unchanged) if it was not allowed.
  bool accept(token_id id);
  // Advance by raw text (e.g. a call marker already generated before the
  // constraint was switched on); false (state unchanged) if it does not match.
  bool accept_bytes(std::string_view bytes);
  // The output so far is a complete value (EOS allowed).
  bool is_complete() const;
  // Nothing more can be accepted (complete and no continuation).
  bool is_finished() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Conveniences: nullptr with *error on failure. The pieces overloads build a
// fresh vocab_index (a few ms on a 32k vocabulary): prefer passing one.
std::unique_ptr<token_constraint> make_json_constraint(std::string_view schema_json,
                                                       std::shared_ptr<const vocab_index> vocab,
                                                       std::string* error,
                                                       json_whitespace ws = json_whitespace::spaced);
std::unique_ptr<token_constraint> make_json_constraint(std::string_view schema_json,
                                                       const std::vector<std::string>& pieces,
                                                       const std::vector<token_id>& eos_ids,
                                                       std::string* error);
std::unique_ptr<token_constraint> make_tool_call_constraint(chat::template_family family,
                                                            const std::vector<tool_def>& tools,
                                                            const tool_choice& choice, bool parallel_tool_calls,
                                                            std::shared_ptr<const vocab_index> vocab,
                                                            std::string* error,
                                                            json_whitespace ws = json_whitespace::spaced);

}  // namespace agentq::grammar
