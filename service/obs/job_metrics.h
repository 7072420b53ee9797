// Worker-side metrics: what a worker process observes about its jobs (queue wait, time to first
// token, inter-token latency, tool waits, job latency) and its engine (set by the sampler). They
// live in their own registry, ship to SQLite with every engine sample (obs/engine_sampler.h) and
// are served by the API process's /metrics labelled worker="...".
#pragma once

#include <agentq/engine.h>

#include <cstdint>
#include <string>

#include "metrics/registry.h"

namespace agentq::obs {

// The worker process's registry (separate from metrics::global(): an all-in-one process
// would otherwise serve these twice).
metrics::registry& worker_registry();

// A claim: created_ms -> first claim is the job's queue wait (later claims are continuations).
void observe_claim(int64_t created_ms, int64_t started_ms, int64_t now_ms);
// One committed model turn: time to first token (engine queue + prefill) and mean inter-token latency.
void observe_turn(const turn_usage& usage);
// One server-side tool call, retries included.
void observe_tool(double seconds, bool ok);
// A job reached a terminal state: created -> now, by status.
void observe_finish(int64_t created_ms, int64_t now_ms, const std::string& status);

}  // namespace agentq::obs
