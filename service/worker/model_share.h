// How one worker process shares its device between the models it serves (#28: "a worker runs every
// model it loads, sharing its CPU threads or GPU memory between them by a stated policy"). The
// daemon builds each model's engine from this; every model worker advertises it (GET /v1/workers).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace agentq::worker {

// The policy (docs/deploy.md "Sharing a device between models"):
// - CPU threads: --engine-threads 0 (the default) splits the cores evenly, cores / models each (at
//   least 1); with one model, 0 leaves the engine its default (every core). An explicit
//   --engine-threads T is each engine's (models x T threads in all, oversubscribed if above cores).
// - Memory: each model's engine has its own KV pool of --kv-budget-mb (models x budget in all), in
//   host memory on the CPU or device memory on a GPU; on a GPU every model's weights are resident on
//   the same --device. No pool is borrowed from another model at run time.
// - Claims: each model worker takes up to --max-jobs of its own model's jobs; they run in the
//   shared engines' continuous batches independently (no cross-model scheduling).
struct model_share {
  std::string device = "cpu";     // --device: cpu, cuda, cuda:N
  int32_t n_models = 1;           // models this process serves
  int32_t n_cores = 1;            // the host's cores (hardware threads)
  int32_t n_threads_each = 0;     // each engine's CPU threads; 0 = the engine's default (every core)
  int64_t kv_budget_mb_each = 0;  // each engine's KV pool, MiB
  std::string rule;               // "split_cores" | "threads_each" | "all_cores"

  nlohmann::json to_json() const;  // the advert's "share" object
};

// The policy above for n_models on device. engine_threads: --engine-threads (0 = split); n_cores:
// std::thread::hardware_concurrency() (0 = unknown: taken as 1).
model_share share_models(const std::string& device, int32_t n_models, int32_t engine_threads, int64_t kv_budget_mb,
                         int32_t n_cores);

}  // namespace agentq::worker
