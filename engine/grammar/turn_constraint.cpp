// Lazy constraints for a tool_choice auto turn (see turn_constraint.h): a small phase
// machine over three token_constraints (opening, response schema, tool call) and the
// tool-call detector of chat/tool_parser.h.
#include "grammar/turn_constraint.h"

#include "chat/tool_parser.h"
#include "grammar/matcher.h"

namespace agentq::grammar {

namespace {

using chat::template_family;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Families whose calls are closed by a tag: after one call the turn may go on (more
// calls, or text). Llama 3 and Mistral calls are a block that ends the turn; a Harmony
// call ends with <|call|>, which ends the turn.
bool tag_family(template_family f) {
  return f != template_family::llama3 && f != template_family::mistral && f != template_family::harmony;
}

bool has_think(template_family f) {
  return f == template_family::qwen3 || f == template_family::smollm3;
}

// Whitespace, then one of `texts`: what may start a turn that is not an answer.
std::shared_ptr<const grammar> opening_grammar(const std::vector<std::string>& texts) {
  auto g = std::make_shared<grammar>();
  gnode ws;
  ws.kind = gkind::ws;
  const int32_t w = g->add(ws);
  gnode alt;
  alt.kind = gkind::alt;
  for (const auto& t : texts) alt.children.push_back(g->literal(t));
  const int32_t a = alt.children.size() == 1 ? alt.children[0] : g->add(alt);
  gnode root;
  root.kind = gkind::seq;
  root.children = {w, a};
  g->root = g->add(std::move(root));
  g->description = "tool-call opening";
  return g;
}

void set_bit(std::vector<uint32_t>& mask, token_id t) {
  if (t >= 0 && size_t(t) / 32 < mask.size()) mask[size_t(t) / 32] |= 1u << (t % 32);
}

}  // namespace

const char* to_string(turn_phase p) {
  switch (p) {
    case turn_phase::free:
      return "free";
    case turn_phase::deciding:
      return "deciding";
    case turn_phase::think:
      return "think";
    case turn_phase::answer:
      return "answer";
    case turn_phase::call:
      return "call";
    case turn_phase::done:
      return "done";
  }
  return "?";
}

std::unique_ptr<turn_constraint> turn_constraint::make(turn_constraint_options options,
                                                       std::shared_ptr<const vocab_index> vocab, std::string* error) {
  auto set_err = [&](std::string e) {
    if (error) *error = std::move(e);
    return nullptr;
  };
  if (options.tools.empty()) return set_err("no tools to call");
  // Compile up front so that errors surface at submission, not mid-turn (both are cached).
  const bool parallel = tag_family(options.family) ? false : options.parallel_tool_calls;
  compile_result tc =
      compile_tool_call_grammar(options.family, options.tools, {tool_choice_mode::required, ""}, parallel, options.json_ws);
  if (!tc.value) return set_err(tc.error);
  if (!options.response_schema_json.empty()) {
    compile_result sc = compile_schema(options.response_schema_json, options.json_ws);
    if (!sc.value) return set_err(sc.error);
  }
  std::unique_ptr<turn_constraint> t(new turn_constraint());
  std::vector<std::string> openings = chat::call_markers(options.family);
  if (options.family == template_family::llama3) openings.push_back("{\"name\"");
  t->open_after_call_grammar_ = opening_grammar(openings);
  if (has_think(options.family)) openings.push_back("<think>");
  t->open_grammar_ = opening_grammar(openings);
  t->opt_ = std::move(options);
  t->vocab_ = std::move(vocab);
  if (t->opt_.response_schema_json.empty())
    t->start_free(0);
  else
    t->start_deciding(true, true, 0);
  return t;
}

turn_constraint::~turn_constraint() = default;

void turn_constraint::start_free(size_t at) {
  phase_ = turn_phase::free;
  phase_start_ = scan_from_ = fed_ = at;
  open_.reset();
  answer_.reset();
  call_.reset();
}

// with_think: a <think> block may come first; with_answer: a schema answer may come (else
// only calls or the end of the turn).
void turn_constraint::start_deciding(bool with_think, bool with_answer, size_t at) {
  phase_ = turn_phase::deciding;
  phase_start_ = fed_ = at;
  with_think_ = with_think && has_think(opt_.family);
  eos_ok_ = !with_answer;
  open_ = std::make_unique<token_constraint>(with_think_ ? open_grammar_ : open_after_call_grammar_, vocab_);
  answer_.reset();
  if (with_answer) answer_ = make_json_constraint(opt_.response_schema_json, vocab_, nullptr, opt_.json_ws);
}

void turn_constraint::start_call(size_t at) {
  phase_ = turn_phase::call;
  phase_start_ = fed_ = at;
  const std::string_view t(text_);
  if (opt_.family == template_family::llama3 && t.substr(at).starts_with("<|python_tag|>")) {
    // NOTE: the Llama grammar has no python tag (it is a control token, never text under a mask).
    fed_ += 14;
    while (fed_ < t.size() && is_space(t[fed_])) fed_++;
  }
  open_.reset();
  answer_.reset();
  const bool parallel = tag_family(opt_.family) ? false : opt_.parallel_tool_calls;
  call_ =
      make_tool_call_constraint(opt_.family, opt_.tools, {tool_choice_mode::required, ""}, parallel, vocab_, nullptr,
                                opt_.json_ws);
}

void turn_constraint::after_call(size_t at) {
  call_.reset();
  if (!tag_family(opt_.family) || !opt_.parallel_tool_calls) {
    phase_ = turn_phase::done;
    fed_ = text_.size();
    return;
  }
  // NOTE: with a response schema, what follows a call is another call or the end of the
  // turn (the answer comes in a later turn, after the tool results); without one, free text.
  if (opt_.response_schema_json.empty())
    start_free(at);
  else
    start_deciding(false, false, at);
}

// Bytes of text that c takes (all, or the longest accepted prefix: byte by byte, only on the
// rare path where a piece of text runs past the end of a value, e.g. a call's closing tag
// followed by a newline in a prefill).
static size_t take(token_constraint& c, std::string_view text) {
  if (c.accept_bytes(text)) return text.size();
  size_t n = 0;
  while (n < text.size() && c.accept_bytes(text.substr(n, 1))) n++;
  return n;
}

// Feed the unfed text to the current phase; true when the phase changed and the rest of the
// text has to go to the new one.
bool turn_constraint::advance() {
  const std::string_view rest = std::string_view(text_).substr(std::min(fed_, text_.size()));
  switch (phase_) {
    case turn_phase::free: {
      fed_ = text_.size();
      const chat::call_open o = chat::find_call_open(opt_.family, text_, scan_from_);
      if (o.at != std::string::npos) {
        start_call(o.at);
        return true;
      }
      scan_from_ = text_.size() - std::min(o.hold, text_.size());
      return false;
    }
    case turn_phase::deciding: {
      size_t open_end = text_.size();  // where a complete opening ends (text after it is not the opening's)
      if (open_) {
        const size_t n = take(*open_, rest);
        if (n < rest.size() && !open_->is_complete()) open_.reset();
        open_end = fed_ + n;
      }
      fed_ = text_.size();
      if (answer_ && !answer_->accept_bytes(rest)) answer_.reset();
      const chat::call_open o = chat::find_call_open(opt_.family, text_, phase_start_);
      if (open_ && o.at != std::string::npos && o.at >= phase_start_) {
        start_call(o.at);
        return true;
      }
      if (open_ && with_think_ && open_->is_complete()) {  // only "<think>" completes without a call
        phase_ = turn_phase::think;
        phase_start_ = fed_ = open_end;
        open_.reset();
        answer_.reset();
        return true;
      }
      if (!open_ && answer_) phase_ = turn_phase::answer;
      else if (!open_ && !answer_) start_free(text_.size());  // e.g. a prefill no grammar takes
      return false;
    }
    case turn_phase::think: {
      fed_ = text_.size();
      const size_t end = text_.find("</think>", phase_start_ >= 7 ? phase_start_ - 7 : 0);
      if (end == std::string::npos) return false;
      start_deciding(false, true, end + 8);
      return true;
    }
    case turn_phase::answer:
      fed_ = text_.size();
      if (!answer_->accept_bytes(rest)) start_free(text_.size());
      return false;
    case turn_phase::call: {
      if (!call_) {  // the tool grammar did not compile (reported at make())
        start_free(text_.size());
        return false;
      }
      const size_t n = take(*call_, rest);
      fed_ += n;
      if (call_->is_finished() || (n < rest.size() && call_->is_complete())) {
        after_call(fed_);
        return fed_ < text_.size();
      }
      if (n < rest.size()) start_free(text_.size());  // malformed: the parser reports it
      return false;
    }
    case turn_phase::done:
      fed_ = text_.size();
      return false;
  }
  return false;
}

bool turn_constraint::fill_mask(std::vector<uint32_t>& mask) {
  const size_t n_words = (size_t(vocab_size(*vocab_)) + 31) / 32;
  switch (phase_) {
    case turn_phase::free:
    case turn_phase::think:
      return false;
    case turn_phase::call:
      call_->fill_mask(mask);
      return true;
    case turn_phase::answer:
      answer_->fill_mask(mask);
      return true;
    case turn_phase::done:
      mask.assign(n_words, 0);
      for (token_id e : vocab_eos_ids(*vocab_)) set_bit(mask, e);
      return true;
    case turn_phase::deciding:
      break;
  }
  mask.assign(n_words, 0);
  for (auto* c : {open_.get(), answer_.get()}) {
    if (!c) continue;
    c->fill_mask(part_);
    for (size_t w = 0; w < n_words; w++) mask[w] |= part_[w];
  }
  // A marker control token may open a call where only whitespace came before.
  bool blank = true;
  for (size_t i = phase_start_; i < text_.size() && blank; i++) blank = is_space(text_[i]);
  if (open_ && blank)
    for (const auto& [id, text] : opt_.markers) set_bit(mask, id);
  if (eos_ok_ && blank)  // not after a partial opening such as "<"
    for (token_id e : vocab_eos_ids(*vocab_)) set_bit(mask, e);
  return true;
}

void turn_constraint::accept(token_id id) {
  for (const auto& [mid, text] : opt_.markers)
    if (mid == id) return accept_text(text);
  accept_text(vocab_piece(*vocab_, id));
}

void turn_constraint::accept_text(std::string_view bytes) {
  text_.append(bytes);
  // NOTE: bounded: every phase change moves on through the text or ends in a phase that eats it all.
  for (int guard = 0; guard < 1024 && advance(); guard++) {
  }
}

bool turn_constraint::is_finished() const {
  if (phase_ == turn_phase::done) return true;
  return phase_ == turn_phase::answer && answer_->is_finished();
}

}  // namespace agentq::grammar
