// Decode (n_x == 1) row kernels on long rows: every group size 1..4 at every row offset
// gives the bits of the batched path (n_x == 2) and stays within tolerance of the scalar
// reference, for every weight type (the rows kernels of rows_avx2.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"

using namespace agentq::kernels;

namespace {

std::vector<float> normal_data(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

TEST_CASE("decode rows kernels: group sizes 1..4 equal the batched path and the reference") {
  for (auto t : {weight_type::f32, weight_type::f16, weight_type::bf16, weight_type::q8_0, weight_type::q4_k,
                 weight_type::q6_k}) {
    INFO(std::string(name_of(t)));
    // Long rows (several prefetch groups; float rows with a 40-element tail).
    const bool k_quant = t == weight_type::q4_k || t == weight_type::q6_k;
    const int64_t n_cols = k_quant ? 2048 : t == weight_type::q8_0 ? 1024 + 32 * 3 : 1024 + 40;
    const int64_t n_rows = 13;
    const size_t stride = row_bytes(t, n_cols);  // packed, as model weights
    std::vector<uint8_t> w(stride * n_rows);
    const auto wf = normal_data(size_t(n_rows * n_cols), 7, 0.02f);
    for (int64_t r = 0; r < n_rows; ++r) quantize_row(t, wf.data() + r * n_cols, w.data() + r * stride, n_cols);
    const auto x2 = normal_data(size_t(2 * n_cols), 8, 1.0f);  // the input and a batch-mate

    std::vector<float> batched(size_t(2 * n_rows)), ref(static_cast<size_t>(n_rows));
    matmul(t, w.data(), stride, n_cols, x2.data(), 2, batched.data(), 0, n_rows, n_rows);
    matmul_reference(t, w.data(), stride, n_cols, x2.data(), 1, ref.data(), 0, n_rows, n_rows);
    for (int64_t begin = 0; begin < 4; ++begin)
      for (int64_t len = 1; begin + len <= n_rows; ++len) {
        CAPTURE(begin);
        CAPTURE(len);
        std::vector<float> y(size_t(n_rows), NAN);
        matmul(t, w.data(), stride, n_cols, x2.data(), 1, y.data(), begin, begin + len, n_rows);
        for (int64_t r = begin; r < begin + len; ++r) {
          REQUIRE(same_bits(y[size_t(r)], batched[size_t(r)]));
          REQUIRE(std::fabs(y[size_t(r)] - ref[size_t(r)]) <= 1e-4f * (1.0f + std::fabs(ref[size_t(r)])));
        }
      }
  }
}
