// The engine's hook into constrained decoding (grammar/): a request's JSON Schema, a
// turn's forced tool call, or (tool_choice auto) a lazily switched tool-call / answer
// grammar becomes an allowed-token mask applied before sampling.
#include <algorithm>

#include "chat/tool_parser.h"
#include "engine_impl.h"
#include "grammar/constraint.h"
#include "grammar/turn_constraint.h"

namespace agentq {

namespace {
class grammar_constraint final : public output_constraint {
 public:
  grammar_constraint(std::unique_ptr<grammar::token_constraint> c, bool tool_call)
      : c_(std::move(c)), tool_call_(tool_call) {}
  bool fill_mask(std::vector<uint32_t>& mask) override {
    c_->fill_mask(mask);
    return true;
  }
  bool accept(token_id id) override { return c_->accept(id); }
  bool accept_text(std::string_view text) override { return c_->accept_bytes(text); }
  bool is_finished() const override { return c_->is_finished(); }
  bool in_call() const override { return tool_call_; }

 private:
  std::unique_ptr<grammar::token_constraint> c_;
  bool tool_call_;  // a forced tool-call turn (else a JSON Schema answer)
};

class lazy_constraint final : public output_constraint {
 public:
  explicit lazy_constraint(std::unique_ptr<grammar::turn_constraint> c) : c_(std::move(c)) {}
  bool fill_mask(std::vector<uint32_t>& mask) override { return c_->fill_mask(mask); }
  bool accept(token_id id) override {
    c_->accept(id);
    return true;
  }
  bool accept_text(std::string_view text) override {
    c_->accept_text(text);
    return true;
  }
  bool is_finished() const override { return c_->is_finished(); }
  bool in_call() const override { return c_->phase() == grammar::turn_phase::call; }

 private:
  std::unique_ptr<grammar::turn_constraint> c_;
};

// NOTE: the family's structural control tokens (chat::control_texts: Harmony's) count as their
// text, so a call's grammar can produce them; other control tokens stay empty (never text).
std::shared_ptr<const grammar::vocab_index> vocab_of(std::shared_ptr<const void>& slot, std::mutex& m,
                                                     const tokenizer& tok, chat::template_family family,
                                                     const std::vector<std::pair<token_id, std::string>>& markers) {
  std::lock_guard lk(m);
  if (!slot) {
    const auto& texts = chat::control_texts(family);
    if (texts.empty()) {
      slot = grammar::make_vocab_index(tok.pieces(), tok.eog_ids());
    } else {
      std::vector<std::string> pieces = tok.pieces();
      for (const auto& [id, text] : markers)
        if (std::find(texts.begin(), texts.end(), text) != texts.end()) pieces[size_t(id)] = text;
      slot = grammar::make_vocab_index(pieces, tok.eog_ids());
    }
  }
  return std::static_pointer_cast<const grammar::vocab_index>(slot);
}
}  // namespace

std::unique_ptr<output_constraint> engine_impl::make_schema_constraint(std::string_view schema_json, json_whitespace ws,
                                                                       std::string* error) const {
  auto c = grammar::make_json_constraint(schema_json, vocab_of(vocab_index_, vocab_mutex_, *tok_, family_, call_markers()), error, ws);
  if (!c) return nullptr;
  return std::make_unique<grammar_constraint>(std::move(c), false);
}

std::unique_ptr<output_constraint> engine_impl::make_tool_constraint(const turn_request& r, std::string* error) const {
  auto c = grammar::make_tool_call_constraint(family_, r.tools, r.choice, r.parallel_tool_calls,
                                              vocab_of(vocab_index_, vocab_mutex_, *tok_, family_, call_markers()), error, r.json_ws);
  if (!c) return nullptr;
  return std::make_unique<grammar_constraint>(std::move(c), true);
}

std::unique_ptr<output_constraint> engine_impl::make_lazy_constraint(const turn_request& r, std::string* error) const {
  grammar::turn_constraint_options o;
  o.family = family_;
  o.tools = r.tools;
  o.parallel_tool_calls = r.parallel_tool_calls;
  o.response_schema_json = r.response_schema_json;
  o.json_ws = r.json_ws;
  // NOTE: only the call openings: Harmony's other structural tokens (also in call_markers(), to be
  // spelled out) must not open a call where only whitespace came before.
  const auto openings = chat::call_markers(family_);
  for (const auto& m : call_markers())
    if (std::find(openings.begin(), openings.end(), m.second) != openings.end()) o.markers.push_back(m);
  auto c = grammar::turn_constraint::make(std::move(o), vocab_of(vocab_index_, vocab_mutex_, *tok_, family_, call_markers()), error);
  if (!c) return nullptr;
  return std::make_unique<lazy_constraint>(std::move(c));
}

std::optional<std::string> engine_impl::check_schema(std::string_view schema_json) const {
  if (schema_json.empty()) return std::nullopt;
  auto r = grammar::compile_schema(schema_json);
  if (!r.value) return r.error;
  return std::nullopt;
}

}  // namespace agentq
