// The CUDA backend's sticky failure flag. Built in every configuration so the
// engine can report cuda_failed() (always false without CUDA) from /readyz.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::cuda {

namespace {
std::atomic<bool> g_failed{false};
std::mutex g_reason_mu;
char g_reason[256] = "";
}  // namespace

bool cuda_failed() { return g_failed.load(std::memory_order_acquire); }

const char* cuda_failed_reason() {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  return g_reason;
}

void set_cuda_failed(const char* reason) {
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (!g_failed.load(std::memory_order_relaxed)) {  // keep the first cause
    std::snprintf(g_reason, sizeof(g_reason), "%s", reason ? reason : "unknown CUDA failure");
    g_failed.store(true, std::memory_order_release);
  }
}

}  // namespace agentq::kernels::cuda
