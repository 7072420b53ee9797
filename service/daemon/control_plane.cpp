// agentqd's control-plane pieces (control_plane.h).
#include "daemon/control_plane.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

namespace agentq::daemon {

namespace {
const std::string& family_of(const config& c, size_t mi) {
  return mi < c.model_chat_families.size() && !c.model_chat_families[mi].empty() ? c.model_chat_families[mi]
                                                                                 : c.chat_family;
}
}  // namespace

bool load_model_headers(const config& c, api::header_catalog& out, std::string* error) {
  for (size_t mi = 0; mi < c.models.size(); ++mi) {
    auto h = model_header::open(c.models[mi], family_of(c, mi), error);
    if (!h) return false;
    const auto& d = h->model();
    spdlog::info("model '{}' header read ({}, n_ctx {}, chat family {}; {} bytes; weights not loaded: role api)",
                 d.name, d.arch, d.n_ctx, d.chat_family, h->bytes().size());
    if (d.chat_family == "unknown")
      spdlog::warn("model '{}': its chat template matches no chat family; tool jobs are refused; choose one with "
                   "--model {} --chat-family NAME", d.name, c.models[mi]);
    out.add(std::move(h));
  }
  return true;
}

std::unique_ptr<api::fleet_catalog> start_fleet_catalog(const config& c, const api::model_catalog& local,
                                                        queue::queue& q) {
  api::fleet_catalog_options o;
  o.model_ttl_h = c.model_ttl_h;
  o.cache_dir = (std::filesystem::path(c.data_dir) / "fleet-models").string();
  // NOTE: its own Redis connection, used by the catalog's poll thread only.
  auto redis = std::make_shared<queue::redis_client>(q.options().redis);
  const std::string prefix = q.options().prefix;
  api::fleet_source src;
  src.list_workers = [&q] { return q.list_workers(); };
  src.header_version = [redis, prefix](const std::string& m) { return queue::fetch_header_version(*redis, prefix, m); };
  src.fetch_header = [redis, prefix](const std::string& m) { return queue::fetch_model_header(*redis, prefix, m); };
  auto f = std::make_unique<api::fleet_catalog>(local, o, std::move(src));
  f->start();
  return f;
}

std::unique_ptr<queue::header_publisher> start_header_publisher(const config& c, const queue::queue_options& qopts,
                                                               std::string* error) {
  std::vector<std::pair<std::string, queue::published_header>> models;
  for (size_t mi = 0; mi < c.models.size(); ++mi) {
    auto h = model_header::open(c.models[mi], family_of(c, mi), error);
    if (!h) return nullptr;
    models.emplace_back(h->model().name, queue::published_header{h->model().digest, family_of(c, mi), h->bytes()});
  }
  // NOTE: every 5 heartbeats: a wiped or failed-over Redis gets the headers back about as soon as the adverts.
  auto p = std::make_unique<queue::header_publisher>(qopts.redis, qopts.prefix, std::move(models),
                                                     std::max<int64_t>(1000, 5 * c.heartbeat_ms));
  p->start();
  return p;
}

}  // namespace agentq::daemon
