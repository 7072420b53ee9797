// Data-parallel replicas of one model (engine_config::n_replicas): N engines, each with its own loop
// thread, scheduler, KV pool (the budget split N ways) and prefix cache, behind the one `engine`
// interface. A model too small to split its ops across threads (k_one_thread_model_bytes) still
// uses every core this way: each replica runs whole scheduler steps on one thread, no fork-join.
// A job runs on replica job_key % n (its turns, KV and spill files there); key-less requests on the
// least busy one.
// docs/queue_perf.md "Session 23 (branch queue9b)".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agentq/engine.h"

namespace agentq {

// engine_config::n_replicas resolved: > 0 as given; <= 0 ("auto") = min(cores, 2) for a model whose
// weights are under k_one_thread_model_bytes on the CPU with n_threads <= 0 ("one per core") and no
// draft model, else 1. cores: std::thread::hardware_concurrency() (0 = unknown: 1).
int32_t resolve_replicas(const engine_config& config, int32_t cores);

// n >= 2 engines of config as one (each: kv_budget_bytes / n, spill_budget_bytes / n, replica r > 0
// spilling into spill_dir/replica-<r>). nullptr with *error set when any fails to load.
std::unique_ptr<engine> load_replica_set(const engine_config& config, int32_t n, std::string* error);

}  // namespace agentq
