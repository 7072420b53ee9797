// Kernels: matmul against a double-precision reference and the scalar path for
// every weight type, and batch invariance — y[b][r] bit-identical whatever n_x,
// row split or batch-mates. Also the vector ops of the forward pass.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"

using namespace agentq::kernels;

namespace {

const weight_type all_types[] = {weight_type::f32, weight_type::f16, weight_type::bf16,
                                 weight_type::q8_0, weight_type::q4_k, weight_type::q6_k};

std::vector<float> normal_data(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct matrix {
  weight_type t;
  int64_t n_rows, n_cols;
  size_t stride;
  std::vector<uint8_t> bytes;   // [n_rows][stride]
  std::vector<float> deq;       // [n_rows][n_cols], the exact values the kernels see
};

// Rows are padded by 32 bytes so a stride larger than the row is exercised too.
matrix make_matrix(weight_type t, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  matrix m{t, n_rows, n_cols, row_bytes(t, n_cols) + 32, {}, {}};
  m.bytes.assign(m.stride * static_cast<size_t>(n_rows), 0xAB);
  m.deq.resize(static_cast<size_t>(n_rows * n_cols));
  const auto w = normal_data(static_cast<size_t>(n_rows * n_cols), seed, 0.02f);
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_row(t, w.data() + r * n_cols, m.bytes.data() + r * m.stride, n_cols);
    dequantize_row(t, m.bytes.data() + r * m.stride, m.deq.data() + r * n_cols, n_cols);
  }
  return m;
}

std::vector<float> run(const matrix& m, const std::vector<float>& x, int64_t n_x, int64_t rb = 0, int64_t re = -1) {
  std::vector<float> y(static_cast<size_t>(n_x * m.n_rows), NAN);
  matmul(m.t, m.bytes.data(), m.stride, m.n_cols, x.data(), n_x, y.data(), rb, re < 0 ? m.n_rows : re, m.n_rows);
  return y;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST_CASE("matmul matches a double-precision reference") {
  // Tolerance relative to |w|.|x| per output: activations are quantized to 8 bits
  // for the quantized types (rms error ~0.4% per element, averaging out over a row).
  struct shape { int64_t n_rows, n_cols, n_x; };
  for (auto t : all_types) {
    const double tol = (t == weight_type::q8_0 || t == weight_type::q4_k || t == weight_type::q6_k) ? 2e-3 : 1e-5;
    for (auto s : {shape{7, 256, 1}, shape{33, 512, 3}, shape{16, 768, 16}, shape{5, 4096, 5}, shape{3, 2816, 2}}) {
      INFO(std::string(name_of(t)), " rows ", s.n_rows, " cols ", s.n_cols, " n_x ", s.n_x);
      const matrix m = make_matrix(t, s.n_rows, s.n_cols, 11);
      const auto x = normal_data(static_cast<size_t>(s.n_x * s.n_cols), 12);
      const auto y = run(m, x, s.n_x);
      std::vector<float> y_ref(y.size());
      matmul_reference(t, m.bytes.data(), m.stride, s.n_cols, x.data(), s.n_x, y_ref.data(), 0, s.n_rows, s.n_rows);
      for (int64_t b = 0; b < s.n_x; ++b) {
        for (int64_t r = 0; r < s.n_rows; ++r) {
          double ref = 0, wn = 0, xn = 0;
          for (int64_t j = 0; j < s.n_cols; ++j) {
            const double wv = m.deq[r * s.n_cols + j], xv = x[b * s.n_cols + j];
            ref += wv * xv;
            wn += wv * wv;
            xn += xv * xv;
          }
          const double scale = std::sqrt(wn * xn);
          const float got = y[b * s.n_rows + r];
          REQUIRE(std::fabs(got - ref) <= tol * scale);
          // The optimised path and the scalar reference path agree closely.
          REQUIRE(std::fabs(got - y_ref[b * s.n_rows + r]) <= 1e-5 * scale);
        }
      }
    }
  }
}

TEST_CASE("float formats handle lengths that are not a multiple of the vector width") {
  for (auto t : {weight_type::f32, weight_type::f16, weight_type::bf16}) {
    for (int64_t n_cols : {1, 7, 31, 33, 100}) {
      INFO(std::string(name_of(t)), " cols ", n_cols);
      const matrix m = make_matrix(t, 3, n_cols, 5);
      const auto x = normal_data(static_cast<size_t>(2 * n_cols), 6);
      const auto y = run(m, x, 2);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t r = 0; r < 3; ++r) {
          double ref = 0, an = 0;
          for (int64_t j = 0; j < n_cols; ++j) {
            ref += double(m.deq[r * n_cols + j]) * x[b * n_cols + j];
            an += std::fabs(double(m.deq[r * n_cols + j]) * x[b * n_cols + j]);
          }
          REQUIRE(std::fabs(y[b * 3 + r] - ref) <= 1e-6 * an + 1e-30);
        }
    }
  }
}

TEST_CASE("batch invariance: y[b][r] is bit-identical across n_x, row splits and batch-mates") {
  const int64_t n_rows = 37, n_cols = 512, n_x = 16;
  for (auto t : all_types) {
    INFO(std::string(name_of(t)));
    const matrix m = make_matrix(t, n_rows, n_cols, 21);
    const auto x = normal_data(static_cast<size_t>(n_x * n_cols), 22);
    const auto full = run(m, x, n_x);

    // Each input alone (decode), over all rows and over uneven row splits.
    for (int64_t b = 0; b < n_x; ++b) {
      std::vector<float> xb(x.begin() + b * n_cols, x.begin() + (b + 1) * n_cols);
      const auto one = run(m, xb, 1);
      std::vector<float> split(static_cast<size_t>(n_rows), NAN);
      for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, 5}, {5, 6}, {6, 30}, {30, 37}})
        matmul(t, m.bytes.data(), m.stride, n_cols, xb.data(), 1, split.data(), rb, re, n_rows);
      for (int64_t r = 0; r < n_rows; ++r) {
        REQUIRE(same_bits(one[r], full[b * n_rows + r]));
        REQUIRE(same_bits(split[r], full[b * n_rows + r]));
      }
    }
    // Groups of 3 with the input at every position and different batch-mates.
    for (int64_t b = 0; b < n_x; ++b) {
      for (int pos = 0; pos < 3; ++pos) {
        std::vector<float> x3(static_cast<size_t>(3 * n_cols));
        const auto mates = normal_data(static_cast<size_t>(3 * n_cols), static_cast<uint32_t>(100 + b * 3 + pos), 5.0f);
        std::copy(mates.begin(), mates.end(), x3.begin());
        std::copy(x.begin() + b * n_cols, x.begin() + (b + 1) * n_cols, x3.begin() + pos * n_cols);
        const auto y3 = run(m, x3, 3, 3, 29);
        for (int64_t r = 3; r < 29; ++r) REQUIRE(same_bits(y3[pos * n_rows + r], full[b * n_rows + r]));
      }
    }
    // A larger batch (crosses the input blocking) with the 16 inputs repeated.
    std::vector<float> x_big;
    for (int rep = 0; rep < 9; ++rep) x_big.insert(x_big.end(), x.begin(), x.end());
    const auto big = run(m, x_big, 9 * n_x, 1, 36);
    for (int64_t b = 0; b < 9 * n_x; ++b)
      for (int64_t r = 1; r < 36; ++r) REQUIRE(same_bits(big[b * n_rows + r], full[(b % n_x) * n_rows + r]));

    // Pre-quantized activations give the same bits as matmul.
    std::vector<uint8_t> qx(activation_bytes(t, n_cols, n_x));
    quantize_activations(t, x.data(), n_cols, n_x, qx.data());
    std::vector<float> yq(full.size(), NAN);
    matmul_prequantized(t, m.bytes.data(), m.stride, n_cols, qx.data(), n_x, yq.data(), 0, n_rows, n_rows);
    for (size_t i = 0; i < full.size(); ++i) REQUIRE(same_bits(yq[i], full[i]));
  }
}

// The batched path runs register-blocked micro-kernels (several rows x several inputs)
// with leftovers in narrower ones: every width 1..9, row ranges of every parity and
// column counts with an odd number of blocks (and float tails) must still give each
// (row, input) the bits of the decode (n_x == 1) path.
TEST_CASE("batch invariance: every batch width, odd row ranges and odd block counts") {
  for (auto t : all_types) {
    INFO(std::string(name_of(t)));
    const int64_t n_cols = t == weight_type::q8_0 ? 15 * 32 : (t == weight_type::q4_k || t == weight_type::q6_k) ? 768 : 77;
    const int64_t n_rows = 11;
    const matrix m = make_matrix(t, n_rows, n_cols, 31);
    const auto x = normal_data(static_cast<size_t>(9 * n_cols), 32);
    std::vector<float> solo(static_cast<size_t>(9 * n_rows));
    for (int64_t b = 0; b < 9; ++b) {
      std::vector<float> xb(x.begin() + b * n_cols, x.begin() + (b + 1) * n_cols);
      const auto one = run(m, xb, 1);
      std::copy(one.begin(), one.end(), solo.begin() + b * n_rows);
    }
    for (int64_t n_x = 2; n_x <= 9; ++n_x)
      for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, 11}, {1, 10}, {2, 9}, {3, 4}, {4, 7}}) {
        CAPTURE(n_x);
        CAPTURE(rb);
        const auto y = run(m, x, n_x, rb, re);
        for (int64_t b = 0; b < n_x; ++b)
          for (int64_t r = rb; r < re; ++r) REQUIRE(same_bits(y[b * n_rows + r], solo[b * n_rows + r]));
      }
  }
}

// Short float rows (a tiny model's 64-256 columns; stories260K: 64 and 172) take a kernel of
// 8 rows x one input on AVX2 builds (rows8_float_avx2), whose 8 rows are reduced together:
// every (row, input) must still have the decode path's bits, for row ranges that start
// anywhere and leave 1-7 rows over, with and without a scalar tail (columns % 8).
TEST_CASE("batch invariance: short float rows, 8-row groups and their leftovers") {
  for (auto t : {weight_type::f32, weight_type::f16, weight_type::bf16}) {
    for (int64_t n_cols : {8, 64, 172, 256, 264}) {
      INFO(std::string(name_of(t)), " cols ", n_cols);
      const int64_t n_rows = 29, n_x = 27;
      const matrix m = make_matrix(t, n_rows, n_cols, 41);
      const auto x = normal_data(static_cast<size_t>(n_x * n_cols), 42);
      std::vector<float> solo(static_cast<size_t>(n_x * n_rows));
      for (int64_t b = 0; b < n_x; ++b) {
        std::vector<float> xb(x.begin() + b * n_cols, x.begin() + (b + 1) * n_cols);
        const auto one = run(m, xb, 1);
        std::copy(one.begin(), one.end(), solo.begin() + b * n_rows);
      }
      for (int64_t nx : {2, 3, 4, 5, 6, 7, 8, 27})  // AVX-512: 4 inputs a step, then 2, then 1
        for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, 29}, {1, 28}, {3, 11}, {5, 6}, {13, 29}}) {
          CAPTURE(nx);
          CAPTURE(rb);
          const auto y = run(m, x, nx, rb, re);
          for (int64_t b = 0; b < nx; ++b)
            for (int64_t r = 0; r < n_rows; ++r) {
              if (r >= rb && r < re) REQUIRE(same_bits(y[b * n_rows + r], solo[b * n_rows + r]));
              else REQUIRE(std::isnan(y[b * n_rows + r]));  // outside the range: not written
            }
        }
    }
  }
}

TEST_CASE("matmul writes only its row range") {
  const matrix m = make_matrix(weight_type::q4_k, 10, 256, 3);
  const auto x = normal_data(2 * 256, 4);
  const auto y = run(m, x, 2, 4, 7);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 10; ++r) CHECK(std::isnan(y[b * 10 + r]) == (r < 4 || r >= 7));
}

TEST_CASE("vector ops") {
  const int64_t n = 300;
  const auto a = normal_data(n, 31), b = normal_data(n, 32);

  double d = 0;
  for (int64_t i = 0; i < n; ++i) d += double(a[i]) * b[i];
  CHECK(dot_f32(a.data(), b.data(), n) == doctest::Approx(d).epsilon(1e-5));

  std::vector<float> y(n);
  rms_norm(a.data(), b.data(), y.data(), n, 1e-5f);
  double ss = 0;
  for (float v : a) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == doctest::Approx(a[i] * inv * b[i]).epsilon(1e-5));

  auto s = a;
  softmax_inplace(s.data(), n);
  double sum = 0;
  for (float v : s) sum += v;
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(s[0] / s[1] == doctest::Approx(std::exp(double(a[0]) - a[1])).epsilon(1e-4));

  silu_mul(a.data(), b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == doctest::Approx(a[i] / (1 + std::exp(-double(a[i]))) * b[i]).epsilon(1e-5));
  // Each element's result does not depend on where it sits (full vectors, the padded tail, or
  // alone), so a token's SwiGLU is the same bits however many tokens share the call.
  for (int64_t i : {int64_t(0), int64_t(5), int64_t(297), n - 1}) {
    float alone = 0;
    silu_mul(a.data() + i, b.data() + i, &alone, 1);
    REQUIRE(alone == y[size_t(i)]);
  }
  {
    const float g[4] = {-200.0f, -90.0f, 90.0f, 0.0f}, u[4] = {1, 1, 1, 1};
    float r[4];
    silu_mul(g, u, r, 4);  // exp clamped: no inf/nan at the extremes
    CHECK(std::fabs(r[0]) < 1e-30f);
    CHECK(std::fabs(r[1]) < 1e-30f);
    CHECK(r[2] == doctest::Approx(90.0f));
    CHECK(r[3] == 0.0f);
  }

  vec_add(a.data(), b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == a[i] + b[i]);
  y = a;
  vec_axpy(0.5f, b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == doctest::Approx(a[i] + 0.5 * b[i]));
  vec_scale(y.data(), 2.0f, n);
}

TEST_CASE("rope: both pairings rotate by pos * base^(-2i/n_rot)") {
  const int64_t n_heads = 3, head_dim = 16, n_rot = 12;
  const float base = 10000.0f;
  const auto v0 = normal_data(n_heads * head_dim, 41);
  for (auto style : {rope_style::normal, rope_style::neox}) {
    for (int64_t pos : {0, 1, 17, 4000}) {
      auto v = v0;
      rope(v.data(), n_heads, head_dim, n_rot, pos, base, 1.0f, style);
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          const int64_t i0 = style == rope_style::neox ? i : 2 * i;
          const int64_t i1 = style == rope_style::neox ? i + n_rot / 2 : 2 * i + 1;
          const double th = double(pos) * std::pow(double(base), -2.0 * double(i) / double(n_rot));
          const double x0 = v0[h * head_dim + i0], x1 = v0[h * head_dim + i1];
          // float theta accumulates relative error ~1e-6 * pos radians
          const double tol = 1e-4 + 2e-6 * double(pos) * (std::fabs(x0) + std::fabs(x1));
          REQUIRE(std::fabs(v[h * head_dim + i0] - (x0 * std::cos(th) - x1 * std::sin(th))) <= tol);
          REQUIRE(std::fabs(v[h * head_dim + i1] - (x0 * std::sin(th) + x1 * std::cos(th))) <= tol);
        }
        for (int64_t j = n_rot; j < head_dim; ++j) REQUIRE(v[h * head_dim + j] == v0[h * head_dim + j]);
      }
    }
  }
  // Linear scale: position 10 at scale 0.5 equals position 5.
  auto p = v0, q = v0;
  rope(p.data(), n_heads, head_dim, n_rot, 10, base, 0.5f);
  rope(q.data(), n_heads, head_dim, n_rot, 5, base, 1.0f);
  for (size_t i = 0; i < p.size(); ++i) REQUIRE(p[i] == doctest::Approx(q[i]).epsilon(1e-5));
}

TEST_CASE("read bandwidth probe returns a plausible figure") {
  const double gbps = measure_read_bandwidth_gbps(64u << 20, 1);
  CHECK(gbps > 0.5);
  CHECK(gbps < 10000);
}

// Q8_0, Q4_K, Q6_K, Q5_K, IQ4_XS and Q3_K repacked into 8-row groups and Q4_0 into 16-row ones (the
// _x8 layouts, the CPU's load-time ones): the AVX2 kernels (or the AVX-512 VNNI ones, where the
// build has them; scripts/test.sh's x86-64-v3 build runs the AVX2 ones on such a host) give
// exactly the bits of the layout's scalar definition for every batch width and row range
// (partial groups included), and stay within float rounding of the file layout.
TEST_CASE("_x8 layouts: repacked Q8_0, Q4_K, Q6_K, Q4_0, Q5_K, IQ4_XS and Q3_K against their scalar definition and the file layout") {
  CHECK(preferred_layout(weight_type::q4_k, 12, 256) == weight_type::q4_k);
  CHECK(preferred_layout(weight_type::q6_k, 12, 256) == weight_type::q6_k);
  CHECK(preferred_layout(weight_type::f16, 16, 256) == weight_type::f16);
  CHECK(preferred_layout(weight_type::q4_0, 8, 256) == weight_type::q4_0);  // q4_0_x16 wants whole groups of 16
  CHECK(preferred_layout(weight_type::iq4_xs, 12, 256) == weight_type::iq4_xs);
  CHECK(matrix_bytes(weight_type::q4_k_x8, 16, 512) == 16 * 2 * 148);
  CHECK(matrix_bytes(weight_type::q8_0_x8, 16, 512) == matrix_bytes(weight_type::q8_0, 16, 512));
  struct kind { weight_type file, x8; std::vector<int64_t> cols; };
  for (const kind& kd : {kind{weight_type::q8_0, weight_type::q8_0_x8, {32, 96, 768, 2816}},
                         kind{weight_type::q4_k, weight_type::q4_k_x8, {256, 768, 2816}},
                         kind{weight_type::q6_k, weight_type::q6_k_x8, {256, 768, 2816}},
                         kind{weight_type::q4_0, weight_type::q4_0_x16, {32, 96, 768, 2816}},
                         kind{weight_type::q5_k, weight_type::q5_k_x8, {256, 768, 2816}},
                         kind{weight_type::iq4_xs, weight_type::iq4_xs_x8, {256, 768, 2816}},
                         kind{weight_type::q3_k, weight_type::q3_k_x8, {256, 768, 2816}}}) {
    if (preferred_layout(kd.file, 16, kd.cols[0]) != kd.x8) {
      MESSAGE("built without AVX2: ", name_of(kd.x8), " is never chosen");
      continue;
    }
    for (int64_t n_cols : kd.cols) {
      // Whole groups of 16 / 8 rows; 40 = 5 groups: the pair kernels (two groups a call) leave one.
      const int64_t n_rows = kd.x8 == weight_type::q4_0_x16 ? 48 : 40;
      INFO(name_of(kd.x8), " cols ", n_cols);
      const size_t rb = row_bytes(kd.file, n_cols);
      std::vector<uint8_t> file(rb * n_rows);
      const auto w = normal_data(static_cast<size_t>(n_rows * n_cols), 41, 0.02f);
      for (int64_t r = 0; r < n_rows; ++r) quantize_row(kd.file, w.data() + r * n_cols, file.data() + r * rb, n_cols);
      std::vector<uint8_t> x8(matrix_bytes(kd.x8, n_rows, n_cols));
      repack(kd.file, file.data(), n_rows, n_cols, kd.x8, x8.data());
      const size_t stride8 = row_bytes(kd.x8, n_cols);
      // Activations with a wide range: Q4_K's int16 sub-block sums run near their bound.
      // 26 inputs: every width of a verify pass (the pair kernels take 5..8 per call, 9..24 in two or
      // three calls) and the first two past it (the blocked prefill path).
      constexpr int64_t nxm = 26;
      const auto x = normal_data(static_cast<size_t>(nxm * n_cols), 42, 3.0f);
      std::vector<float> ref(static_cast<size_t>(nxm * n_rows)), want(ref.size());
      matmul_reference(kd.x8, x8.data(), stride8, n_cols, x.data(), nxm, ref.data(), 0, n_rows, n_rows);
      matmul_reference(kd.file, file.data(), rb, n_cols, x.data(), nxm, want.data(), 0, n_rows, n_rows);
      for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::fabs(ref[i] - want[i]) <= 1e-5f * (std::fabs(want[i]) + 1.0f));
      for (int64_t n_x = 1; n_x <= nxm; ++n_x)
        for (auto [b, e] : {std::pair<int64_t, int64_t>{0, n_rows}, {8, 16}, {3, 21}, {5, 6}, {16, 24}, {17, 47},
                            {0, 32}, {9, 40}, {24, 40}}) {
          if (e > n_rows) continue;  // {17, 47}: the 48-row case only
          CAPTURE(n_x);
          CAPTURE(b);
          CAPTURE(e);
          std::vector<float> y(static_cast<size_t>(n_x * n_rows), NAN);
          matmul(kd.x8, x8.data(), stride8, n_cols, x.data(), n_x, y.data(), b, e, n_rows);
          for (int64_t i = 0; i < n_x; ++i)
            for (int64_t r = 0; r < n_rows; ++r) {
              const float got = y[i * n_rows + r];
              if (r < b || r >= e) REQUIRE(std::isnan(got));
              else REQUIRE(same_bits(got, ref[i * n_rows + r]));
            }
        }
      // Many inputs (crosses the input blocking), pre-quantized.
      std::vector<float> xb;
      for (int rep = 0; rep < 8; ++rep) xb.insert(xb.end(), x.begin(), x.end());
      std::vector<uint8_t> qx(activation_bytes(kd.x8, n_cols, 8 * nxm));
      quantize_activations(kd.x8, xb.data(), n_cols, 8 * nxm, qx.data());
      std::vector<float> yb(static_cast<size_t>(8 * nxm * n_rows));
      matmul_prequantized(kd.x8, x8.data(), stride8, n_cols, qx.data(), 8 * nxm, yb.data(), 0, n_rows, n_rows);
      for (int64_t i = 0; i < 8 * nxm; ++i)
        for (int64_t r = 0; r < n_rows; ++r) REQUIRE(same_bits(yb[i * n_rows + r], ref[(i % nxm) * n_rows + r]));
    }
  }
  // Repacking to the same type copies.
  std::vector<uint8_t> a(row_bytes(weight_type::q8_0, 64) * 3, 7), c(a.size());
  repack(weight_type::q8_0, a.data(), 3, 64, weight_type::q8_0, c.data());
  CHECK(a == c);
}

// The AVX2 kernels add int16 partial sums where their bounds allow (Q4_0: 16 products of 15 * 127,
// Q5_K: 8 of 31 * 127, IQ4_XS: pairs of 127 * 127, Q3_K: 8 of 7 * 127): quants at their extremes against full-scale
// activations (every Q8 quant +-127) must still give the scalar definition's bits.
TEST_CASE("_x8 layouts: extreme quants against full-scale activations") {
  struct kind { weight_type file, x8; uint8_t fill; std::vector<std::pair<size_t, uint8_t>> bytes; };
  // Per block: the fill byte everywhere, then (offset, byte) pairs; fp16 0x2000 ~ 0.0078 as scales.
  for (const kind& kd : {kind{weight_type::q4_0, weight_type::q4_0_x16, 0xFF, {{0, 0x00}, {1, 0x20}}},
                         kind{weight_type::q4_0, weight_type::q4_0_x16, 0x00, {{0, 0x00}, {1, 0x20}}},
                         kind{weight_type::q5_k, weight_type::q5_k_x8, 0xFF, {{0, 0x00}, {1, 0x20}, {2, 0x00}, {3, 0x20}}},
                         // Q4_K: every quant 15, scales and mins 63 (fill 0xFF; d, dmin at 0, 2): a sub-block's
                         // sum 32 * 15 * 127 is past int16, the pair kernel's int32 sums must hold it
                         kind{weight_type::q4_k, weight_type::q4_k_x8, 0xFF, {{0, 0x00}, {1, 0x20}, {2, 0x00}, {3, 0x20}}},
                         kind{weight_type::iq4_xs, weight_type::iq4_xs_x8, 0x00,
                              {{0, 0x00}, {1, 0x20}, {2, 0xFF}, {3, 0xFF}, {4, 0xFF}, {5, 0xFF}, {6, 0xFF}, {7, 0xFF}}},
                         kind{weight_type::iq4_xs, weight_type::iq4_xs_x8, 0xFF, {{0, 0x00}, {1, 0x20}}},
                         // Q3_K: every quant 7 (hmask and qs all ones) or -4 (all zeros), scales 31 / -32 (fill 0xFF / 0x00), d at 108
                         kind{weight_type::q3_k, weight_type::q3_k_x8, 0xFF, {{108, 0x00}, {109, 0x20}}},
                         kind{weight_type::q3_k, weight_type::q3_k_x8, 0x00, {{108, 0x00}, {109, 0x20}}}}) {
    const int64_t n_rows = 16, n_cols = 512;
    if (preferred_layout(kd.file, n_rows, n_cols) != kd.x8) {
      MESSAGE("built without AVX2: ", name_of(kd.x8), " is never chosen");
      continue;
    }
    INFO(name_of(kd.x8), " fill ", int(kd.fill));
    const size_t rb = row_bytes(kd.file, n_cols), bb = block_bytes(kd.file);
    std::vector<uint8_t> file(rb * n_rows, kd.fill);
    for (size_t o = 0; o < file.size(); o += bb)
      for (auto [off, v] : kd.bytes) file[o + off] = v;
    std::vector<uint8_t> x8(matrix_bytes(kd.x8, n_rows, n_cols));
    repack(kd.file, file.data(), n_rows, n_cols, kd.x8, x8.data());
    // Inputs: all +1, all -1, and +-1 alternating (every quant at full scale), repeated up to 8
    // inputs (the few-input pair kernels take 5..8).
    constexpr int64_t nxm = 8;
    std::vector<float> x(static_cast<size_t>(nxm * n_cols));
    for (int64_t b = 0; b < nxm; ++b)
      for (int64_t j = 0; j < n_cols; ++j) x[b * n_cols + j] = b % 3 == 0 ? 1.0f : b % 3 == 1 ? -1.0f : (j % 2 ? 1.0f : -1.0f);
    const size_t stride8 = row_bytes(kd.x8, n_cols);
    std::vector<float> ref(static_cast<size_t>(nxm * n_rows)), y(ref.size(), NAN);
    matmul_reference(kd.x8, x8.data(), stride8, n_cols, x.data(), nxm, ref.data(), 0, n_rows, n_rows);
    std::vector<float> want(ref.size());
    matmul_reference(kd.file, file.data(), rb, n_cols, x.data(), nxm, want.data(), 0, n_rows, n_rows);
    for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::fabs(ref[i] - want[i]) <= 1e-5f * (std::fabs(want[i]) + 1.0f));
    for (int64_t n_x = 1; n_x <= nxm; ++n_x) {
      CAPTURE(n_x);
      matmul(kd.x8, x8.data(), stride8, n_cols, x.data(), n_x, y.data(), 0, n_rows, n_rows);
      for (int64_t i = 0; i < n_x * n_rows; ++i) REQUIRE(same_bits(y[i], ref[i]));
    }
  }
}
