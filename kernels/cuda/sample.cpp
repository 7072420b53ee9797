// Reference sampling for sample.cu. The rule, shared with the kernel:
//  1. temperature <= 0 or top_k == 1: argmax (lowest index on ties).
//  2. top_k: keep logits whose key is >= K, K the largest key with count(key >= K) >= top_k.
//  3. weights w = exp((l - max) / T); top_p: raise K to the largest key with
//     mass(key >= K) >= top_p * mass(key >= K_top_k).
//  4. r = philox_uniform(seed, counter) * Z; walk the vocab in sample_threads chunks (float sums
//     per chunk, then chunk by chunk) and take the first kept token where the running sum > r.
#include <algorithm>
#include <cmath>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "philox.h"

namespace agentq::kernels::ref {

using detail::float_key;

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  detail::philox4x32_10(ctr, key, out);
}

float philox_uniform(uint64_t seed, uint64_t counter) { return detail::philox_uniform(seed, counter); }

int32_t argmax_row(const float* logits, int32_t n_vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t sample_row(const float* l, int32_t n_vocab, const sample_params& p) {
  const int32_t amax = argmax_row(l, n_vocab);
  if (p.temperature <= 0.0f || p.top_k == 1 || std::isinf(l[amax])) return amax;
  const float m = l[amax];
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](int32_t i) { return std::exp((l[i] - m) * inv_t); };

  uint32_t k_min = 0;
  if (p.top_k > 0 && p.top_k < n_vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k_min | (1u << bit);
      int32_t count = 0;
      for (int32_t i = 0; i < n_vocab; ++i) count += float_key(l[i]) >= cand;
      if (count >= p.top_k) k_min = cand;
    }
  }
  if (p.top_p < 1.0f) {
    auto mass = [&](uint32_t k) {
      double s = 0;
      for (int32_t i = 0; i < n_vocab; ++i)
        if (float_key(l[i]) >= k) s += weight(i);
      return s;
    };
    const double target = double(p.top_p) * mass(k_min);
    // mass(key >= K) is non-increasing in K and >= target at k_min, so the greedy
    // bitwise search from 0 finds the largest such K, which is >= k_min.
    uint32_t k = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k | (1u << bit);
      if (mass(cand) >= target) k = cand;
    }
    k_min = std::max(k, k_min);
  }

  const int32_t chunk = (n_vocab + detail::sample_threads - 1) / detail::sample_threads;
  std::vector<float> chunk_sum(size_t(detail::sample_threads), 0.0f);
  for (int32_t c = 0; c < detail::sample_threads; ++c)
    for (int32_t i = c * chunk; i < std::min(n_vocab, (c + 1) * chunk); ++i)
      if (float_key(l[i]) >= k_min) chunk_sum[size_t(c)] += weight(i);
  float z = 0;
  for (float s : chunk_sum) z += s;
  const float r = detail::philox_uniform(p.seed, p.counter) * z;
  float run = 0;
  int32_t c = 0;
  for (; c < detail::sample_threads - 1; ++c) {
    if (run + chunk_sum[size_t(c)] > r) break;
    run += chunk_sum[size_t(c)];
  }
  int32_t last = amax;
  for (int32_t i = c * chunk; i < std::min(n_vocab, (c + 1) * chunk); ++i) {
    if (float_key(l[i]) < k_min) continue;
    const float w = weight(i);
    if (w <= 0.0f) continue;
    run += w;
    last = i;
    if (run > r) return i;
  }
  return last;
}

}  // namespace agentq::kernels::ref
