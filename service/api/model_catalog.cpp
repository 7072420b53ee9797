// engine_catalog and header_catalog: model list and validation over loaded engines or model headers
// (see model_catalog.h).
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

std::vector<model_info> header_catalog::list() const {
  std::vector<model_info> out;
  for (const auto& h : headers_) out.push_back({h->model().name, h->model().arch, h->model().n_ctx, true, h->model().chat_family});
  return out;
}

std::optional<std::string> header_catalog::validate(const std::string& model, const turn_request& request) const {
  return validate_with_rooms(model, request, {});
}

std::optional<std::string> header_catalog::validate_with_rooms(const std::string& model, const turn_request& request,
                                                               std::span<const kv_room> rooms) const {
  for (const auto& h : headers_)
    if (h->model().name == model) return h->validate(request, rooms);
  return "unknown model '" + model + "'";
}

}  // namespace agentq::api
