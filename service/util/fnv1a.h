// FNV-1a, 64 bits: a fast, stable (the same across builds and hosts) hash of a short text, for keys
// and checks that outlive a process (not for adversarial input or tables a client can flood).
#pragma once

#include <cstdint>
#include <string_view>

namespace agentq::util {

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace agentq::util
