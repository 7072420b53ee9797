// Loading the engine for a worker (kept apart so tests with a scripted engine don't link the model code).
#include <agentq/engine.h>

#include "worker/worker.h"

namespace agentq::worker {

std::shared_ptr<engine> load_engine(const engine_config& config, std::string* error) {
  return std::shared_ptr<engine>(engine::load(config, error));
}

}  // namespace agentq::worker
