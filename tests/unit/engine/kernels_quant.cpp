// Kernels: fp16/bf16 conversions and the block formats (quantize -> dequantize
// error bounds, byte layout, determinism) for every weight type.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "agentq/kernels.h"

using namespace agentq::kernels;

namespace {

std::vector<float> normal_data(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Root-mean-square error of quantize -> dequantize, relative to the data's rms.
double relative_rmse(weight_type t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  std::vector<float> back(x.size());
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  dequantize_row(t, q.data(), back.data(), static_cast<int64_t>(x.size()));
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
    ss += double(x[i]) * x[i];
  }
  return std::sqrt(se / ss);
}

}  // namespace

TEST_CASE("fp16 conversion: known values and every half round-trips") {
  CHECK(fp32_to_fp16(1.0f) == 0x3c00);
  CHECK(fp32_to_fp16(-2.0f) == 0xc000);
  CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);                 // rounds to inf
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  CHECK(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(fp16_to_fp32(0x3555) == doctest::Approx(0.333251953125));
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan) {
      CHECK(std::isnan(fp16_to_fp32(static_cast<uint16_t>(h))));
      continue;
    }
    REQUIRE(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))) == h);
#if defined(__F16C__)
    REQUIRE(_cvtsh_ss(static_cast<uint16_t>(h)) == fp16_to_fp32(static_cast<uint16_t>(h)));
#endif
  }
#if defined(__F16C__)
  // The hardware conversion rounds the same way as ours.
  for (float f : normal_data(100000, 7, 3.0f)) {
    REQUIRE(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT) == fp32_to_fp16(f));
  }
#endif
}

TEST_CASE("bf16 conversion: rounding and round-trip") {
  CHECK(fp32_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_fp32(0x3f80) == 1.0f);
  CHECK(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even
  CHECK(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie -> even (up)
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (nan) continue;
    REQUIRE(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("type geometry matches ggml") {
  CHECK(block_elems(weight_type::q8_0) == 32);
  CHECK(block_bytes(weight_type::q8_0) == 34);
  CHECK(block_elems(weight_type::q4_k) == 256);
  CHECK(block_bytes(weight_type::q4_k) == 144);
  CHECK(block_bytes(weight_type::q6_k) == 210);
  CHECK(row_bytes(weight_type::f16, 4096) == 8192);
  CHECK(row_bytes(weight_type::q4_k, 4096) == 16 * 144);
  CHECK(static_cast<uint32_t>(weight_type::bf16) == 30);
  CHECK(is_weight_type(14));
  CHECK(is_weight_type(2));  // Q4_0 (kernels_formats.cpp)
  CHECK_FALSE(is_weight_type(16));  // IQ2_XXS
}

TEST_CASE("quantize -> dequantize error bounds") {
  const auto x = normal_data(4096 * 4, 1);
  struct bound { weight_type t; double max_rel_rmse; };
  // Expected from the formats: 8-bit ~0.4%, 6-bit ~2%, 4-bit (with mins) ~8%.
  for (auto [t, max_err] : {bound{weight_type::f32, 0.0}, bound{weight_type::f16, 3e-4},
                            bound{weight_type::bf16, 3e-3}, bound{weight_type::q8_0, 0.008},
                            bound{weight_type::q6_k, 0.03}, bound{weight_type::q4_k, 0.10}}) {
    const double e = relative_rmse(t, x);
    INFO(std::string(name_of(t)), " rel rmse ", e);
    CHECK(e <= max_err);
  }
  // Error scales with the data: tiny and huge magnitudes behave alike.
  for (auto t : {weight_type::q8_0, weight_type::q4_k, weight_type::q6_k}) {
    INFO(std::string(name_of(t)));
    CHECK(relative_rmse(t, normal_data(1024, 2, 1e-3f)) < 0.1);
    CHECK(relative_rmse(t, normal_data(1024, 3, 1e3f)) < 0.1);
  }
}

TEST_CASE("all-zero and constant blocks") {
  for (auto t : {weight_type::q8_0, weight_type::q4_k, weight_type::q6_k}) {
    INFO(std::string(name_of(t)));
    std::vector<float> z(512, 0.0f), back(512, 1.0f);
    std::vector<uint8_t> q(row_bytes(t, 512));
    quantize_row(t, z.data(), q.data(), 512);
    dequantize_row(t, q.data(), back.data(), 512);
    for (float v : back) REQUIRE(v == 0.0f);
    std::vector<float> c(512, 0.75f);
    quantize_row(t, c.data(), q.data(), 512);
    dequantize_row(t, q.data(), back.data(), 512);
    for (float v : back) REQUIRE(v == doctest::Approx(0.75).epsilon(0.02));
  }
}

TEST_CASE("Q8_0 block layout is ggml's") {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);  // amax 16 at i = 0
  block_q8_0 b;
  quantize_row(weight_type::q8_0, x.data(), &b, 32);
  CHECK(b.d == fp32_to_fp16(16.0f / 127.0f));
  CHECK(b.qs[0] == -127);
  CHECK(b.qs[16] == 0);
  uint8_t raw[34];
  std::memcpy(raw, &b, 34);
  CHECK(static_cast<int8_t>(raw[2]) == -127);  // qs follow the 2-byte scale
}

TEST_CASE("Q4_K and Q6_K decode hand-built blocks") {
  // Q4_K: d = 1, dmin = 0.5, sub-block j has scale j+1 and min j (6-bit packing).
  block_q4_k b4{};
  b4.d = fp32_to_fp16(1.0f);
  b4.dmin = fp32_to_fp16(0.5f);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(j + 1 + (j >= 4 ? 40 : 0)), lm = static_cast<uint8_t>(j + (j >= 4 ? 20 : 0));
    if (j < 4) {
      b4.scales[j] = ls;
      b4.scales[j + 4] = lm;
    } else {
      b4.scales[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      b4.scales[j - 4] |= (ls >> 4) << 6;
      b4.scales[j] |= (lm >> 4) << 6;
    }
  }
  for (int i = 0; i < 128; ++i) b4.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  std::vector<float> y(256);
  dequantize_row(weight_type::q4_k, &b4, y.data(), 256);
  for (int j = 0; j < 8; ++j) {
    const float sc = static_cast<float>(j + 1 + (j >= 4 ? 40 : 0)), mn = static_cast<float>(j + (j >= 4 ? 20 : 0));
    for (int l = 0; l < 32; ++l) {
      const int byte = 32 * (j / 2) + l;
      const int q = j % 2 == 0 ? (byte % 16) : (15 - byte % 16);
      REQUIRE(y[32 * j + l] == sc * q - 0.5f * mn);
    }
  }
  // Q6_K: d = 0.25, scales[k] = k - 8; quant of element e is e % 64.
  block_q6_k b6{};
  b6.d = fp32_to_fp16(0.25f);
  for (int k = 0; k < 16; ++k) b6.scales[k] = static_cast<int8_t>(k - 8);
  for (int e = 0; e < 256; ++e) {
    const int q = e % 64, half = e / 128, r = e % 128, l = r % 32, which = r / 32;
    uint8_t* ql = b6.ql + 64 * half;
    uint8_t* qh = b6.qh + 32 * half;
    const int lo = q & 0xF, hi = q >> 4;
    if (which == 0) ql[l] |= static_cast<uint8_t>(lo);
    if (which == 1) ql[l + 32] |= static_cast<uint8_t>(lo);
    if (which == 2) ql[l] |= static_cast<uint8_t>(lo << 4);
    if (which == 3) ql[l + 32] |= static_cast<uint8_t>(lo << 4);
    qh[l] |= static_cast<uint8_t>(hi << (2 * which));
  }
  dequantize_row(weight_type::q6_k, &b6, y.data(), 256);
  for (int e = 0; e < 256; ++e) REQUIRE(y[e] == 0.25f * static_cast<float>(e / 16 - 8) * static_cast<float>(e % 64 - 32));
}

TEST_CASE("quantizers are deterministic and re-quantizing is stable") {
  const auto x = normal_data(2048, 9);
  for (auto t : {weight_type::q8_0, weight_type::q4_k, weight_type::q6_k, weight_type::f16, weight_type::bf16}) {
    INFO(std::string(name_of(t)));
    std::vector<uint8_t> a(row_bytes(t, 2048)), b(a.size());
    quantize_row(t, x.data(), a.data(), 2048);
    quantize_row(t, x.data(), b.data(), 2048);
    CHECK(a == b);
    // Dequantized values re-quantize to values at least as close (idempotence up to scale rounding).
    std::vector<float> y(2048), z(2048);
    dequantize_row(t, a.data(), y.data(), 2048);
    quantize_row(t, y.data(), b.data(), 2048);
    dequantize_row(t, b.data(), z.data(), 2048);
    double se = 0, ss = 0;
    for (int i = 0; i < 2048; ++i) {
      se += (double(z[i]) - y[i]) * (double(z[i]) - y[i]);
      ss += double(y[i]) * y[i];
    }
    CHECK(std::sqrt(se / ss) < 0.05);
  }
}

// Q8_K activations (the input format of Q4_K / Q6_K matmuls) against their definition, written
// out here: per 256 floats the first value of largest magnitude sets iscale = -127 / it (NaNs
// never do), quants = min(127, nearest_int(iscale * x)) wrapped to int8, sums per 16, d =
// 1 / iscale. The vectorized quantizer must give these bits for ties, zeros, NaN and inf too.
TEST_CASE("Q8_K and Q8_0 activations: bit-exact against the scalar definitions, special values included") {
  struct q8k { float d; int8_t qs[256]; int16_t bsums[16]; };
  static_assert(sizeof(q8k) == 292);
  auto nearest = [](float v) {
    const float val = v + 12582912.f;
    int32_t i;
    std::memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
  };
  auto reference = [&](const float* x) {
    q8k y{};
    float max = 0, amax = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
    if (!amax) return y;
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) y.qs[j] = static_cast<int8_t>(std::min(127, nearest(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += y.qs[16 * j + k];
      y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = 1 / iscale;
    return y;
  };
  const int64_t n_cols = 768;
  std::vector<std::vector<float>> rows;
  for (float sigma : {1e-6f, 0.02f, 3.0f, 1e4f}) rows.push_back(normal_data(n_cols, 7, sigma));
  std::vector<float> special = normal_data(n_cols, 8);
  special[3] = 5.0f, special[40] = -5.0f;        // block 0, a tie: the first (positive) wins
  for (int j = 0; j < 256; ++j) special[size_t(256 + j)] = (j % 2 ? 0.0f : -0.0f);  // block 1: zeros
  special[520] = std::nanf("");                  // block 2: NaN never sets the scale
  special[600] = -6.0f, special[601] = 6.0f;     // block 2, a tie: the first (negative) wins
  rows.push_back(special);
  std::vector<float> inf = normal_data(n_cols, 9);
  inf[10] = INFINITY, inf[300] = -INFINITY, inf[700] = std::nanf("");
  rows.push_back(inf);
  std::vector<float> tail = normal_data(n_cols, 10);  // the largest in a block's last 8 (the vector search's tail)
  tail[255] = 9.0f, tail[256 + 248] = -9.0f, tail[512 + 247] = 9.0f, tail[512 + 250] = -9.0f;
  rows.push_back(tail);
  std::vector<float> halves(n_cols);
  for (int64_t j = 0; j < n_cols; ++j) halves[size_t(j)] = 0.5f * float(j % 7) - 1.5f;  // rounding ties
  halves[0] = -127.0f;
  rows.push_back(halves);
  // Q8_0 activations (the input of Q8_0 matmuls): per 32 floats d = max |x| / 127 (NaNs never
  // raise it), quants nearest_int(x * (d ? 1 / d : 0)) wrapped to int8.
  struct q8_0x { float d; int8_t qs[32]; };
  static_assert(sizeof(q8_0x) == 36);
  for (const auto& x : rows) {
    std::vector<uint8_t> got(activation_bytes(weight_type::q8_0, n_cols, 1));
    REQUIRE(got.size() == 24 * sizeof(q8_0x));
    quantize_activations(weight_type::q8_0, x.data(), n_cols, 1, got.data());
    for (int b = 0; b < 24; ++b) {
      q8_0x want{};
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(32 * b + j)]));
      want.d = amax / 127.f;
      const float id = want.d ? 1.0f / want.d : 0.0f;
      for (int j = 0; j < 32; ++j) want.qs[j] = static_cast<int8_t>(nearest(x[size_t(32 * b + j)] * id));
      CAPTURE(b);
      CHECK(std::memcmp(got.data() + b * sizeof(q8_0x), &want, sizeof(q8_0x)) == 0);
    }
  }
  for (const auto& x : rows) {
    std::vector<uint8_t> got(activation_bytes(weight_type::q4_k, n_cols, 1));
    REQUIRE(got.size() == 3 * sizeof(q8k));
    quantize_activations(weight_type::q4_k, x.data(), n_cols, 1, got.data());
    for (int b = 0; b < 3; ++b) {
      const q8k want = reference(x.data() + 256 * b);
      CAPTURE(b);
      CHECK(std::memcmp(got.data() + b * sizeof(q8k), &want, sizeof(q8k)) == 0);
    }
  }
}
