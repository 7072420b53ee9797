// The stated policy by which a worker process shares CPU threads and KV memory between its models
// (model_share.h).
#include "worker/model_share.h"

#include <algorithm>

namespace agentq::worker {

nlohmann::json model_share::to_json() const {
  return {{"device", device},
          {"models", n_models},
          {"cores", n_cores},
          {"threads_each", n_threads_each},
          {"kv_budget_mb_each", kv_budget_mb_each},
          {"rule", rule}};
}

model_share share_models(const std::string& device, int32_t n_models, int32_t engine_threads, int64_t kv_budget_mb,
                         int32_t n_cores) {
  model_share s;
  s.device = device.empty() ? "cpu" : device;
  s.n_models = std::max<int32_t>(1, n_models);
  s.n_cores = std::max<int32_t>(1, n_cores);
  s.kv_budget_mb_each = kv_budget_mb;  // NOTE: not divided: each model's pool is sized as if alone
  if (engine_threads > 0) {
    s.n_threads_each = engine_threads;
    s.rule = "threads_each";
  } else if (s.n_models > 1) {
    s.n_threads_each = std::max<int32_t>(1, s.n_cores / s.n_models);
    s.rule = "split_cores";
  } else {
    s.n_threads_each = 0;
    s.rule = "all_cores";
  }
  return s;
}

}  // namespace agentq::worker
