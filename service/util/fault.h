// Fault injection for crash tests: AGENTQ_FAULT=<point> makes the process _exit(137) when it
// reaches that point (always compiled in; one string compare per check).
// Points: after_claim, after_turn_commit, after_tool_effect, before_xack.
#pragma once

#include <string_view>

namespace agentq::worker {

// _exit(137) if AGENTQ_FAULT names this point.
void fault_point(std::string_view point);

}  // namespace agentq::worker
