// Random weights in the ggml block layouts and small paged-KV fixtures, shared by
// tests/unit/engine/cuda_reference.cpp and tests/gpu/cuda_kernels.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"

namespace agentq::test {

using kernels::cuda::weight_type;

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// n_rows rows of n_in elements of type t with realistic scales (finite, no NaN).
inline std::vector<uint8_t> random_weights(weight_type t, int64_t n_rows, int64_t n_in, std::mt19937& rng) {
  const size_t rb = kernels::cuda::row_bytes(t, n_in);
  std::vector<uint8_t> w(rb * size_t(n_rows));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto put16 = [&](size_t off, uint16_t v) { std::memcpy(w.data() + off, &v, 2); };
  auto scale = [&](float lo, float hi) { return kernels::fp32_to_fp16(lo + (hi - lo) * (unit(rng) * 0.5f + 0.5f)); };
  const int64_t n = n_rows * n_in;
  switch (t) {
    case weight_type::f32:
      for (int64_t i = 0; i < n; ++i) {
        const float f = unit(rng);
        std::memcpy(w.data() + 4 * i, &f, 4);
      }
      break;
    case weight_type::f16:
      for (int64_t i = 0; i < n; ++i) put16(size_t(2 * i), kernels::fp32_to_fp16(unit(rng)));
      break;
    case weight_type::bf16:
      for (int64_t i = 0; i < n; ++i) put16(size_t(2 * i), kernels::fp32_to_bf16(unit(rng)));
      break;
    case weight_type::q8_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        put16(size_t(34 * b), scale(0.002f, 0.02f));
        for (int j = 0; j < 32; ++j) w[size_t(34 * b + 2 + j)] = uint8_t(byte(rng));
      }
      break;
    case weight_type::q4_k:
      for (int64_t b = 0; b < n / 256; ++b) {
        put16(size_t(144 * b), scale(0.001f, 0.01f));
        put16(size_t(144 * b + 2), scale(0.001f, 0.01f));
        for (int j = 4; j < 144; ++j) w[size_t(144 * b + j)] = uint8_t(byte(rng));
      }
      break;
    case weight_type::q6_k:
      for (int64_t b = 0; b < n / 256; ++b) {
        for (int j = 0; j < 208; ++j) w[size_t(210 * b + j)] = uint8_t(byte(rng));
        put16(size_t(210 * b + 208), scale(0.0005f, 0.002f));
      }
      break;
    default: {  // the #26 formats: random quants, the fp16 scales (or MXFP4's exponent) kept small
      for (auto& v : w) v = uint8_t(byte(rng));
      const size_t bb = size_t(kernels::cuda::block_bytes(t));
      for (size_t o = 0; o < w.size(); o += bb) {
        switch (t) {
          case weight_type::q4_0: case weight_type::q5_0: case weight_type::iq4_nl: put16(o, scale(0.001f, 0.004f)); break;
          case weight_type::q4_1: case weight_type::q5_1:
            put16(o, scale(0.001f, 0.004f)), put16(o + 2, scale(-0.02f, 0.0f));
            break;
          case weight_type::q2_k: put16(o + 80, scale(0.001f, 0.004f)), put16(o + 82, scale(0.001f, 0.004f)); break;
          case weight_type::q3_k: put16(o + 108, scale(0.0002f, 0.001f)); break;
          case weight_type::q5_k: put16(o, scale(0.0002f, 0.001f)), put16(o + 2, scale(0.0002f, 0.001f)); break;
          case weight_type::iq4_xs: put16(o, scale(0.00005f, 0.0002f)); break;
          case weight_type::mxfp4: w[o] = uint8_t(118 + byte(rng) % 4); break;
          default: break;
        }
      }
      break;
    }
  }
  return w;
}

// A paged cache of n_blocks blocks for one layer with shuffled block tables.
struct paged_fixture {
  int32_t n_head_kv, head_dim, block_size, max_blocks, n_blocks;
  std::vector<float> k, v;              // [n_blocks][block_size][n_head_kv*head_dim]
  std::vector<int32_t> block_tables;    // [n_seqs][max_blocks]

  paged_fixture(const std::vector<int32_t>& seq_lens, int32_t n_head_kv_, int32_t head_dim_, int32_t block_size_,
                std::mt19937& rng)
      : n_head_kv(n_head_kv_), head_dim(head_dim_), block_size(block_size_) {
    max_blocks = 1;
    int32_t total = 0;
    for (int32_t len : seq_lens) {
      const int32_t nb = (len + block_size - 1) / block_size;
      max_blocks = std::max(max_blocks, nb);
      total += nb;
    }
    n_blocks = total + 3;  // a few unused blocks
    std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_tables.assign(seq_lens.size() * size_t(max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < seq_lens.size(); ++s)
      for (int32_t b = 0; b < (seq_lens[s] + block_size - 1) / block_size; ++b)
        block_tables[s * size_t(max_blocks) + size_t(b)] = perm[next++];
    const size_t n = size_t(n_blocks) * size_t(block_size) * size_t(n_head_kv * head_dim);
    k = random_floats(n, rng);
    v = random_floats(n, rng);
  }
};

// max |a - b| / max |b|: the error relative to the largest reference magnitude.
inline double rel_err(const float* a, const float* b, size_t n) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, double(std::abs(double(a[i]) - double(b[i]))));
    mag = std::max(mag, double(std::abs(double(b[i]))));
  }
  return mag > 0 ? err / mag : err;
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() ? rel_err(a.data(), b.data(), a.size()) : 1e30;
}

}  // namespace agentq::test
