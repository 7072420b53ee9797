// Per-key token bucket: `rate` requests per second sustained, bursts up to `burst`.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace agentq::auth {

class rate_limiter {
 public:
  rate_limiter(double rate_per_s, double burst) : rate_(rate_per_s), burst_(burst) {}

  // Take one token for key at time now; 0 when allowed, else seconds until a token is
  // available (rounded up, >= 1) for Retry-After. rate <= 0 disables limiting.
  int32_t acquire(const std::string& key, std::chrono::steady_clock::time_point now);
  int32_t acquire(const std::string& key) { return acquire(key, std::chrono::steady_clock::now()); }

 private:
  struct bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  double rate_, burst_;
  std::mutex mu_;
  std::unordered_map<std::string, bucket> buckets_;
};

}  // namespace agentq::auth
