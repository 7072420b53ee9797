// engine_catalog: model list and validation over loaded engines (see model_catalog.h).
#include "api/model_catalog.h"

namespace agentq::api {

std::vector<model_info> engine_catalog::list() const {
  std::vector<model_info> out;
  for (const auto& e : engines_)
    out.push_back({e->model().name, e->model().arch, e->model().n_ctx, e->healthy(), e->model().chat_family});
  return out;
}

std::shared_ptr<engine> engine_catalog::find(const std::string& name) const {
  for (const auto& e : engines_)
    if (e->model().name == name) return e;
  return nullptr;
}

std::optional<std::string> engine_catalog::validate(const std::string& model, const turn_request& request) const {
  auto e = find(model);
  if (!e) return "unknown model '" + model + "'";
  return e->validate(request);
}

}  // namespace agentq::api
