// Tool call ids: unique across the deployment, stable across retries, crashes and re-claims.
// Derived from the job id, the turn and the call's index, so a re-run of the same committed turn
// produces the same id and no two jobs ever share one (tool servers de-duplicate by it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agentq::worker {

// "job_<hex>", turn 2, index 1 -> "call_<hex>_2_1" (the job id's "job_" prefix dropped, so a log
// line naming a call does not look like it names a second job)
std::string make_call_id(std::string_view job_id, int32_t turn_idx, size_t call_idx);

// the turn a call id of ours was made in; nullopt for an id not made by make_call_id
std::optional<int32_t> turn_of_call_id(std::string_view call_id);

}  // namespace agentq::worker
