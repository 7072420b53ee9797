// Message-level turns: render messages (chat/), tokenize, submit as a token request,
// and turn the generated text back into an assistant message (tool calls parsed).
#include "engine_impl.h"
#include "tokenizer/splice.h"
#include "turn_check.h"

namespace agentq {

std::string engine_impl::render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const {
  return chat::render(family_, messages, tools, true);
}

std::optional<std::string> engine_impl::validate(const turn_request& r) const { return validate_prompt(r, nullptr); }

std::optional<std::string> engine_impl::validate_prompt(const turn_request& r, turn_prompt* prompt) const {
  size_t n = 0;
  const auto room = [&](size_t b) { return b <= size_t(INT32_MAX) && pool_->fits(int32_t(b)); };
  if (auto e = check_turn(r, family_, *tok_, desc_.n_ctx, &n, prompt, room)) return e;
  // NOTE: a weightless control plane makes this check with the rooms workers advertise (model_header::validate).
  if (!room(n)) return kv_room_message(n);
  return std::nullopt;
}

std::unique_ptr<active_request> engine_impl::make_turn(turn_request r, turn_callbacks cb, std::string* error) const {
  turn_prompt prompt;
  if (auto e = validate_prompt(r, &prompt)) {
    *error = *e;
    return nullptr;
  }
  auto ar = std::make_unique<active_request>();
  ar->is_turn = true;
  ar->turn_cb = std::move(cb);
  const auto& tr = chat::traits(family_);
  ar->req.job_key = r.job_key;
  ar->req.arrival_seq = r.arrival_seq;
  ar->req.priority = r.priority;
  ar->prefix = r.assistant_prefix;
  // NOTE: the text and ids validate() made (render + encode were run twice per turn before)
  ar->prompt_text = std::move(prompt.text);
  ar->req.prompt = std::move(prompt.ids);
  ar->req.max_tokens = r.max_tokens;
  ar->req.sampling = r.sampling;
  ar->req.stop = r.stop;
  // NOTE: plain text, no special tokens: a prediction is what the reply's text looks like. A
  // SentencePiece vocabulary puts a space before the text; the reply's own first space (" Anna")
  // is that one, so it is not doubled.
  if (!r.prediction.empty()) {
    std::string_view text = r.prediction;
    if (tok_->adds_space_prefix() && text.starts_with(' ')) text.remove_prefix(1);
    ar->req.prediction = tok_->encode(text, false, false);
  }
  for (const auto& s : tr.stop_strings) ar->req.stop.push_back(s);
  const bool tools_on = !r.tools.empty() && r.choice.mode != tool_choice_mode::none;
  if (tools_on) {
    ar->parser = make_parser(r);
    // required / named: the whole turn is the call; auto: free (or the response schema) until
    // the model opens a call, then that call's grammar (docs/chat_and_grammar.md, lazy constraints).
    const bool forced = r.choice.mode == tool_choice_mode::required || r.choice.mode == tool_choice_mode::named;
    ar->constraint = forced ? make_tool_constraint(r, error) : make_lazy_constraint(r, error);
    if (!ar->constraint) return nullptr;
  } else if (!r.response_schema_json.empty()) {
    ar->constraint = make_schema_constraint(r.response_schema_json, r.json_ws, error);
    if (!ar->constraint) return nullptr;
  }
  // NOTE: a Harmony turn always goes through the parser: its reasoning (analysis channel) and
  // message headers are never content, with or without tools.
  if (!ar->parser && family_ == chat::template_family::harmony) ar->parser = make_parser(r);
  if (ar->constraint && !ar->constraint->accept_text(r.assistant_prefix)) {
    *error = "assistant_prefix: does not fit the forced output format (tool call or response_format)";
    return nullptr;
  }
  return ar;
}

// NOTE: the transcript is re-rendered and re-tokenized every turn, but the job's KV holds the
// tokens the model sampled (constrained decoding picks non-canonical splits such as "a","l","l"
// for "all"): without the splice the tail of the last reply is computed again every turn. A
// restarted process reads the same tokens from the spill file, so both take the same prompt.
void engine_impl::splice_turn_prompt(active_request& ar) {
  if (ar.req.job_key == 0 || !sched_->config().prefix_reuse || ar.prompt_text.empty()) return;
  const auto held = residency_->job_tokens(ar.req.job_key);
  if (held.empty()) return;
  auto s = splice_prompt(*tok_, held, ar.prompt_text, !chat::traits(family_).bos_in_text);
  if (s.n_kept == 0) return;
  // NOTE: kept splits may be longer than the canonical ones; validate() counted the canonical
  // prompt, so a splice that would not fit the context is not taken.
  if (desc_.n_ctx > 0 && s.tokens.size() > size_t(desc_.n_ctx) && s.tokens.size() > ar.req.prompt.size()) return;
  ar.req.prompt = std::move(s.tokens);
}

void engine_impl::finish_turn(active_request& ar, token_result res) {
  turn_result out;
  out.finish = res.finish;
  out.usage = res.usage;
  out.error = res.error;
  out.output_ids = std::move(res.output_ids);
  out.message.role = role::assistant;
  if (ar.parser && res.finish != finish_reason::error && res.finish != finish_reason::cancelled) {
    chat::parse_result pr = ar.parser->finish(res.finish == finish_reason::length);
    out.message = std::move(pr.message);
    out.message.role = role::assistant;
    if (!out.message.tool_calls.empty() && res.finish == finish_reason::stop) out.finish = finish_reason::tool_calls;
    for (const auto& e : pr.errors) out.error += (out.error.empty() ? "" : "; ") + e;
  } else {
    out.message.content = std::move(res.text);
  }
  if (ar.turn_cb.on_done) ar.turn_cb.on_done(std::move(out));
}

}  // namespace agentq
