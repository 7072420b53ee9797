// Model headers through Redis (#28): a worker publishes the GGUF header of each model it serves
// (PREFIX:model:<name>:header, a hash of digest, chat_family and bytes), so a control plane that
// has no file for the model validates its requests exactly as with the file (api/fleet_catalog.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "queue/redis_client.h"

namespace agentq::queue {

struct published_header {
  std::string digest;       // model_desc::digest of the header
  std::string chat_family;  // the worker's --chat-family for the model ("" = detected from the template)
  std::string bytes;        // model_header::bytes(): metadata + tensor table
};

// Headers larger than this are neither published nor fetched.
inline constexpr size_t k_max_published_header_bytes = size_t(256) << 20;

std::string model_header_key(const std::string& prefix, const std::string& model);
// HSET unless Redis already holds this digest and chat family; false on a Redis error.
bool publish_model_header(redis_client& c, const std::string& prefix, const std::string& model,
                          const published_header& h);
// "digest\nchat_family" of the published header (cheap: no bytes); "" when none; nullopt on a Redis error.
std::optional<std::string> fetch_header_version(redis_client& c, const std::string& prefix, const std::string& model);
// The whole header; nullopt when none, too large, or on a Redis error.
std::optional<published_header> fetch_model_header(redis_client& c, const std::string& prefix, const std::string& model);

// Worker side: keeps its models' headers in Redis, re-publishing after a wipe or a failover
// (checked every interval_ms; a write only when Redis lacks or differs).
class header_publisher {
 public:
  header_publisher(redis_options redis, std::string prefix, std::vector<std::pair<std::string, published_header>> models,
                   int64_t interval_ms);
  ~header_publisher();
  void start();
  void stop();
  int32_t publish_once();  // headers written now

 private:
  redis_client client_;
  std::string prefix_;
  std::vector<std::pair<std::string, published_header>> models_;
  int64_t interval_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false;
  std::thread thread_;
};

}  // namespace agentq::queue
