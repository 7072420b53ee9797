// Fault injection for crash tests: AGENTQ_FAULT=<point> makes the process _exit(137) when it
// reaches that point (always compiled in; one getenv + string compare per check). With
// AGENTQ_FAULT_MATCH=<text> set too, only when the call site's subject contains <text> (worker
// points pass the job's request JSON, so a test marks one job, e.g. metadata {"chaos":"poison-7"}).
// Points: after_claim, mid_decode (turn submitted to the engine, result not yet committed),
// after_turn_commit, after_tool_effect (tool answered, result not recorded), before_xack (worker);
// mid_webhook (receiver answered 2xx, attempt not recorded; webhook sender in the API role);
// after_batch_chunk (a batch's chunk of jobs committed, the next not yet; subject: the batch id).
#pragma once

#include <string_view>

namespace agentq {

// _exit(137) if AGENTQ_FAULT names this point (and AGENTQ_FAULT_MATCH, if set, occurs in subject).
void fault_point(std::string_view point, std::string_view subject = {});

}  // namespace agentq
