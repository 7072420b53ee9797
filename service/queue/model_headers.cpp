// Model headers through Redis (model_headers.h).
#include "queue/model_headers.h"

#include <spdlog/spdlog.h>

namespace agentq::queue {

std::string model_header_key(const std::string& prefix, const std::string& model) {
  return prefix + ":model:" + model + ":header";
}

std::optional<std::string> fetch_header_version(redis_client& c, const std::string& prefix, const std::string& model) {
  auto r = c.command({"HMGET", model_header_key(prefix, model), "digest", "chat_family"});
  if (r.type != redis_reply::kind::array || r.elements.size() != 2) return std::nullopt;
  if (r.elements[0].type != redis_reply::kind::string) return std::string();
  return r.elements[0].str + "\n" + r.elements[1].str;
}

bool publish_model_header(redis_client& c, const std::string& prefix, const std::string& model,
                          const published_header& h) {
  if (h.bytes.size() > k_max_published_header_bytes) return false;
  auto have = fetch_header_version(c, prefix, model);
  if (!have) return false;
  if (*have == h.digest + "\n" + h.chat_family) return true;
  if (!have->empty() && have->substr(0, have->find('\n')) != h.digest)
    spdlog::warn("model '{}': another worker published a different header ({}); this worker's ({}) replaces it — "
                 "workers serving one model name should load the same file",
                 model, have->substr(0, have->find('\n')), h.digest);
  auto r = c.command({"HSET", model_header_key(prefix, model), "digest", h.digest, "chat_family", h.chat_family,
                      "bytes", h.bytes});
  return r.ok();
}

std::optional<published_header> fetch_model_header(redis_client& c, const std::string& prefix, const std::string& model) {
  const std::string key = model_header_key(prefix, model);
  auto len = c.command({"HSTRLEN", key, "bytes"});
  if (len.type != redis_reply::kind::integer || len.integer <= 0 ||
      uint64_t(len.integer) > k_max_published_header_bytes)
    return std::nullopt;
  auto r = c.command({"HMGET", key, "digest", "chat_family", "bytes"});
  if (r.type != redis_reply::kind::array || r.elements.size() != 3) return std::nullopt;
  for (auto& e : r.elements)
    if (e.type != redis_reply::kind::string) return std::nullopt;
  return published_header{r.elements[0].str, r.elements[1].str, r.elements[2].str};
}

header_publisher::header_publisher(redis_options redis, std::string prefix,
                                   std::vector<std::pair<std::string, published_header>> models, int64_t interval_ms)
    : client_(std::move(redis)), prefix_(std::move(prefix)), models_(std::move(models)), interval_ms_(interval_ms) {}

header_publisher::~header_publisher() { stop(); }

int32_t header_publisher::publish_once() {
  int32_t n = 0;
  for (const auto& [name, h] : models_) {
    auto have = fetch_header_version(client_, prefix_, name);
    if (!have || *have == h.digest + "\n" + h.chat_family) continue;
    if (publish_model_header(client_, prefix_, name, h)) {
      ++n;
      spdlog::info("model '{}': header published for control planes ({} bytes, digest {})", name, h.bytes.size(),
                   h.digest);
    }
  }
  return n;
}

void header_publisher::start() {
  // NOTE: once before the caller's workers advertise, so a control plane seldom sees a model without its header.
  publish_once();
  std::lock_guard lock(mu_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (running_) {
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return !running_; });
      if (!running_) break;
      lock.unlock();
      publish_once();
      lock.lock();
    }
  });
}

void header_publisher::stop() {
  {
    std::lock_guard lock(mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace agentq::queue
