// Tool call ids (call_ids.h).
#include "call_ids.h"

#include <charconv>

namespace agentq::worker {

std::string make_call_id(std::string_view job_id, int32_t turn_idx, size_t call_idx) {
  if (job_id.starts_with("job_")) job_id.remove_prefix(4);
  std::string id = "call_";
  id.append(job_id);
  id += '_';
  id += std::to_string(turn_idx);
  id += '_';
  id += std::to_string(call_idx);
  return id;
}

std::optional<int32_t> turn_of_call_id(std::string_view call_id) {
  if (!call_id.starts_with("call_")) return std::nullopt;
  // "call_<job>_<turn>_<idx>": the turn is the field before the last '_'
  size_t last = call_id.rfind('_');
  if (last == std::string_view::npos || last < 5) return std::nullopt;
  size_t prev = call_id.rfind('_', last - 1);
  if (prev == std::string_view::npos || prev < 4) return std::nullopt;
  std::string_view turn = call_id.substr(prev + 1, last - prev - 1);
  int32_t t = 0;
  auto [end, ec] = std::from_chars(turn.data(), turn.data() + turn.size(), t);
  if (ec != std::errc() || end != turn.data() + turn.size() || t < 0) return std::nullopt;
  return t;
}

}  // namespace agentq::worker
