// libFuzzer target: the --redis URL parser (#28) over arbitrary bytes must never crash; what it
// accepts has a host and a port in range (a sentinel:// URL: 1-16 sentinels, each with a host and
// a port in range, and a master name), and an error never repeats the password it was given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "queue/redis_url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string url(reinterpret_cast<const char*>(data), size);
  std::string err;
  auto o = agentq::queue::parse_redis_url(url, &err);
  if (o) {
    if (o->host.empty() || o->port <= 0 || o->port > 65535 || o->db < 0) std::abort();
    if (url.starts_with("sentinel://") != !o->sentinels.empty()) std::abort();
    if (!o->sentinels.empty() && (o->master_name.empty() || o->sentinels.size() > 16)) std::abort();
    for (const auto& [host, port] : o->sentinels)
      if (host.empty() || port <= 0 || port > 65535) std::abort();
  } else if (err.empty()) {
    std::abort();
  }
  (void)agentq::queue::redact_redis_url(url);
  return 0;
}
