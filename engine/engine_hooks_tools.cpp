// The engine's hook into tool-call parsing (chat/tool_parser.h): content streams while a
// call is buffered, and the finished turn becomes an assistant message with tool_calls.
#include <algorithm>

#include "chat/tool_parser.h"
#include "engine_impl.h"

namespace agentq {

namespace {
class chat_parser final : public output_parser {
 public:
  explicit chat_parser(std::unique_ptr<chat::tool_parser> p) : p_(std::move(p)) {}
  std::string feed(std::string_view piece) override { return p_->feed(piece); }
  chat::parse_result finish(bool truncated) const override { return p_->finish(truncated); }

 private:
  std::unique_ptr<chat::tool_parser> p_;
};
}  // namespace

std::vector<std::pair<token_id, std::string>> find_call_markers(const tokenizer& tok, chat::template_family family) {
  std::vector<std::pair<token_id, std::string>> out;
  std::vector<std::string> texts = chat::call_markers(family);
  for (const std::string& c : chat::control_texts(family))
    if (std::find(texts.begin(), texts.end(), c) == texts.end()) texts.push_back(c);
  for (const std::string& m : texts) {
    const token_id id = tok.find_token(m);
    // NOTE: only tokens that decode to nothing: a user-defined "<tool_call>" (Qwen) is already text.
    if (id >= 0 && tok.token_to_piece(id, false).empty() && tok.token_to_piece(id, true) == m) out.emplace_back(id, m);
  }
  return out;
}

const std::vector<std::pair<token_id, std::string>>& engine_impl::call_markers() const {
  std::call_once(call_markers_once_, [this] { call_markers_ = find_call_markers(*tok_, family_); });
  return call_markers_;
}

const std::string* engine_impl::call_marker_text(token_id id) const {
  for (const auto& [mid, text] : call_markers())
    if (mid == id) return &text;
  return nullptr;
}

std::unique_ptr<output_parser> engine_impl::make_parser(const turn_request& r) const {
  // NOTE: call ids derive from (job, arrival): a re-run of the same turn gets the same ids.
  const uint64_t seed = r.job_key * 0x9e3779b97f4a7c15ull ^ r.arrival_seq ^ uint64_t(r.messages.size());
  return std::make_unique<chat_parser>(chat::make_tool_parser(family_, r.tools, r.choice, r.parallel_tool_calls, seed));
}

}  // namespace agentq
