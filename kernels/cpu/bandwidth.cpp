// Streaming-read bandwidth probe: the roofline that matvec throughput is judged against.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "agentq/kernels.h"

namespace agentq::kernels {

namespace {

// Sum of 64-bit words over [p, p + n) (n a multiple of 128 bytes); the result
// keeps the loads from being optimised away.
uint64_t stream_read(const uint8_t* p, size_t n) {
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), a0);
  return v[0] + v[1] + v[2] + v[3];
#else
  uint64_t s[4] = {};
  for (size_t i = 0; i < n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    for (int k = 0; k < 4; ++k) s[k] += w[k];
  }
  return s[0] + s[1] + s[2] + s[3];
#endif
}

double measure(size_t bytes, int n_threads, bool cpu_clock) {
  n_threads = std::max(1, n_threads);
  const size_t chunk = std::max<size_t>(4096, bytes / static_cast<size_t>(n_threads) / 4096 * 4096);
  const size_t total = chunk * static_cast<size_t>(n_threads);
  // NOTE: the same memory as the engine's weights (weights.h weight_store): 2 MiB pages.
  auto* buf = static_cast<uint8_t*>(alloc_huge(total));
  if (!buf) return 0;
  // Each thread first-touches its own slice (NUMA-local pages).
  {
    std::vector<std::thread> ts;
    for (int t = 0; t < n_threads; ++t)
      ts.emplace_back([=] { std::memset(buf + chunk * t, t + 1, chunk); });
    for (auto& th : ts) th.join();
  }
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
    std::vector<double> cpu(static_cast<size_t>(n_threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < n_threads; ++t)
      ts.emplace_back([&, t] {
        const double c0 = thread_cpu_seconds();
        sums[static_cast<size_t>(t)] = stream_read(buf + chunk * t, chunk);
        cpu[static_cast<size_t>(t)] = thread_cpu_seconds() - c0;
      });
    for (auto& th : ts) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cpu_clock) s = *std::max_element(cpu.begin(), cpu.end());
    for (uint64_t v : sums) sink = sink + v;
    best = std::max(best, static_cast<double>(total) / s / 1e9);
  }
  free_huge(buf, total);
  return best;
}

}  // namespace

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double measure_read_bandwidth_gbps(size_t bytes, int n_threads) { return measure(bytes, n_threads, false); }
double measure_read_bandwidth_cpu_gbps(size_t bytes, int n_threads) { return measure(bytes, n_threads, true); }

}  // namespace agentq::kernels
