// Token bucket rate limiter (see rate_limiter.h).
#include "auth/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace agentq::auth {

int32_t rate_limiter::acquire(const std::string& key, std::chrono::steady_clock::time_point now) {
  if (rate_ <= 0) return 0;
  std::lock_guard lock(mu_);
  auto [it, inserted] = buckets_.try_emplace(key);
  bucket& b = it->second;
  if (inserted) {
    b.tokens = burst_;
    b.last = now;
  }
  double elapsed = std::chrono::duration<double>(now - b.last).count();
  if (elapsed > 0) {
    b.tokens = std::min(burst_, b.tokens + elapsed * rate_);
    b.last = now;
  }
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return 0;
  }
  return std::max(1, int32_t(std::ceil((1.0 - b.tokens) / rate_)));
}

}  // namespace agentq::auth
