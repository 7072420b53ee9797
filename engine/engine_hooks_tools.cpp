// The engine's hook into tool-call parsing (chat/tool_parser.h): content streams while a
// call is buffered, and the finished turn becomes an assistant message with tool_calls.
#include "chat/tool_parser.h"
#include "engine_impl.h"

namespace agentq {

namespace {
class chat_parser final : public output_parser {
 public:
  explicit chat_parser(std::unique_ptr<chat::tool_parser> p) : p_(std::move(p)) {}
  std::string feed(std::string_view piece) override { return p_->feed(piece); }
  chat::parse_result finish() const override { return p_->finish(); }

 private:
  std::unique_ptr<chat::tool_parser> p_;
};
}  // namespace

std::unique_ptr<output_parser> engine_impl::make_parser(const turn_request& r) const {
  // NOTE: call ids derive from (job, arrival): a re-run of the same turn gets the same ids.
  const uint64_t seed = r.job_key * 0x9e3779b97f4a7c15ull ^ r.arrival_seq ^ uint64_t(r.messages.size());
  return std::make_unique<chat_parser>(chat::make_tool_parser(family_, r.tools, r.choice, r.parallel_tool_calls, seed));
}

}  // namespace agentq
