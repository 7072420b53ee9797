// Kernels: the ggml block formats beyond Q8_0/Q4_K/Q6_K (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q5_K, IQ4_NL, IQ4_XS, MXFP4): geometry, hand-built blocks against the format definitions,
// and the generic dot products against a double-precision reference and batch invariance.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "test_env.h"

using namespace agentq::kernels;

namespace {

const weight_type new_types[] = {weight_type::q4_0, weight_type::q4_1, weight_type::q5_0, weight_type::q5_1,
                                 weight_type::q2_k, weight_type::q3_k, weight_type::q5_k, weight_type::iq4_nl,
                                 weight_type::iq4_xs, weight_type::mxfp4};

constexpr int8_t iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

std::vector<float> normal_data(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A row of random but well-formed blocks: random quant bytes, small positive fp16 scales
// (and an E8M0 exponent near 2^-7 for MXFP4) where each format keeps them.
std::vector<uint8_t> random_row(weight_type t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(row_bytes(t, n));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> sc(0.0005f, 0.004f);
  auto put = [&](size_t off, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(b.data() + off, &h, 2);
  };
  const size_t bb = block_bytes(t);
  for (size_t i = 0; i < b.size() / bb; ++i) {
    const size_t o = i * bb;
    switch (t) {
      case weight_type::q4_0: case weight_type::q5_0: case weight_type::iq4_nl: put(o, sc(rng)); break;
      case weight_type::q4_1: case weight_type::q5_1: put(o, sc(rng)); put(o + 2, -8 * sc(rng)); break;
      case weight_type::mxfp4: b[o] = static_cast<uint8_t>(119 + rng() % 4); break;
      case weight_type::q2_k: put(o + 80, sc(rng)); put(o + 82, sc(rng)); break;
      case weight_type::q3_k: put(o + 108, sc(rng) / 8); break;
      case weight_type::q5_k: put(o, sc(rng) / 8); put(o + 2, sc(rng) / 8); break;
      case weight_type::iq4_xs: put(o, sc(rng) / 32); break;
      default: break;
    }
  }
  return b;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

uint16_t h(float v) { return fp32_to_fp16(v); }

}  // namespace

TEST_CASE("new formats: geometry matches ggml") {
  struct geo { weight_type t; int64_t elems; size_t bytes; uint32_t id; };
  for (auto g : {geo{weight_type::q4_0, 32, 18, 2}, geo{weight_type::q4_1, 32, 20, 3}, geo{weight_type::q5_0, 32, 22, 6},
                 geo{weight_type::q5_1, 32, 24, 7}, geo{weight_type::q2_k, 256, 84, 10}, geo{weight_type::q3_k, 256, 110, 11},
                 geo{weight_type::q5_k, 256, 176, 13}, geo{weight_type::iq4_nl, 32, 18, 20},
                 geo{weight_type::iq4_xs, 256, 136, 23}, geo{weight_type::mxfp4, 32, 17, 39}}) {
    INFO(name_of(g.t));
    CHECK(block_elems(g.t) == g.elems);
    CHECK(block_bytes(g.t) == g.bytes);
    CHECK(static_cast<uint32_t>(g.t) == g.id);
    CHECK(is_weight_type(g.id));
  }
  CHECK_FALSE(is_weight_type(16));  // IQ2_XXS stays refused
}

TEST_CASE("Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 decode hand-built blocks") {
  float y[32];
  {
    block_q4_0 b{h(0.5f), {}};
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dequantize_row(weight_type::q4_0, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(y[j] == 0.5f * (j - 8));
      CHECK(y[j + 16] == 0.5f * (7 - j));
    }
  }
  {
    block_q4_1 b{h(0.25f), h(-1.0f), {}};
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dequantize_row(weight_type::q4_1, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(y[j] == 0.25f * j - 1.0f);
      CHECK(y[j + 16] == 0.25f * (15 - j) - 1.0f);
    }
  }
  // Q5: element j's fifth bit is bit j of qh (little-endian u32); j < 16 low nibbles, else high.
  const uint32_t qh = 0xA5C3'0F01u;
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((j * 7) & 0xF) | static_cast<uint8_t>(((j * 3) & 0xF) << 4);
  auto q5 = [&](int j) { return (j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4)) + 16 * int((qh >> j) & 1); };
  {
    block_q5_0 b{h(0.125f), {}, {}};
    std::memcpy(b.qh, &qh, 4);
    std::memcpy(b.qs, qs, 16);
    dequantize_row(weight_type::q5_0, &b, y, 32);
    for (int j = 0; j < 32; ++j) CHECK(y[j] == 0.125f * (q5(j) - 16));
  }
  {
    block_q5_1 b{h(0.125f), h(0.75f), {}, {}};
    std::memcpy(b.qh, &qh, 4);
    std::memcpy(b.qs, qs, 16);
    dequantize_row(weight_type::q5_1, &b, y, 32);
    for (int j = 0; j < 32; ++j) CHECK(y[j] == 0.125f * q5(j) + 0.75f);
  }
  {
    block_iq4_nl b{h(0.5f), {}};
    std::memcpy(b.qs, qs, 16);
    dequantize_row(weight_type::iq4_nl, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(y[j] == 0.5f * iq4nl[qs[j] & 0xF]);
      CHECK(y[j + 16] == 0.5f * iq4nl[qs[j] >> 4]);
    }
  }
  // MXFP4: E8M0 scale 2^(e-127) times the E2M1 value; e = 0 and 1 are the subnormal scales.
  for (uint8_t e : {uint8_t(0), uint8_t(1), uint8_t(120), uint8_t(127), uint8_t(130)}) {
    block_mxfp4 b{e, {}};
    std::memcpy(b.qs, qs, 16);
    dequantize_row(weight_type::mxfp4, &b, y, 32);
    const float s = std::ldexp(1.0f, int(e) - 127);
    for (int j = 0; j < 16; ++j) {
      CHECK(y[j] == s * fp4[qs[j] & 0xF]);
      CHECK(y[j + 16] == s * fp4[qs[j] >> 4]);
    }
  }
}

TEST_CASE("Q2_K, Q3_K, Q5_K, IQ4_XS decode hand-built blocks") {
  std::mt19937 rng(7);
  float y[256];
  {
    block_q2_k b{};
    for (auto& v : b.scales) v = static_cast<uint8_t>(rng());
    for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
    b.d = h(0.5f);
    b.dmin = h(0.25f);
    dequantize_row(weight_type::q2_k, &b, y, 256);
    // element e: half k = e / 128, shift s = (e % 128) / 32, byte 32k + e % 32; sub-block e / 16
    for (int e = 0; e < 256; ++e) {
      const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sc = b.scales[e / 16];
      CHECK(y[e] == 0.5f * float(sc & 0xF) * float(q) - 0.25f * float(sc >> 4));
    }
  }
  {
    block_q3_k b{};
    for (auto& v : b.hmask) v = static_cast<uint8_t>(rng());
    for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
    // 16 6-bit scales: low 4 bits in scales[0..7] (nibbles), high 2 bits in scales[8..11].
    int sc[16];
    for (int i = 0; i < 16; ++i) sc[i] = int(rng() % 64);
    std::memset(b.scales, 0, 12);
    for (int i = 0; i < 16; ++i) {
      b.scales[i % 8] |= static_cast<uint8_t>((sc[i] & 0xF) << (4 * (i / 8)));
      b.scales[8 + i % 4] |= static_cast<uint8_t>((sc[i] >> 4) << (2 * (i / 4)));
    }
    b.d = h(0.5f);
    dequantize_row(weight_type::q3_k, &b, y, 256);
    for (int e = 0; e < 256; ++e) {
      const int k = e / 128, s = (e % 128) / 32, l = e % 32;
      const int lo = (b.qs[32 * k + l] >> (2 * s)) & 3;
      const int hi = (b.hmask[l] >> (4 * k + s)) & 1;
      CHECK(y[e] == 0.5f * float(sc[e / 16] - 32) * float(lo - (hi ? 0 : 4)));
    }
  }
  {
    block_q5_k b{};
    for (auto& v : b.qh) v = static_cast<uint8_t>(rng());
    for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
    for (auto& v : b.scales) v = static_cast<uint8_t>(rng());
    b.d = h(0.5f);
    b.dmin = h(0.125f);
    dequantize_row(weight_type::q5_k, &b, y, 256);
    for (int e = 0; e < 256; ++e) {
      const int j = e / 32, l = e % 32;  // sub-block j: nibble j % 2 of qs[32 (j / 2) + l], bit j of qh[l]
      const int q = ((b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) + 16 * ((b.qh[l] >> j) & 1);
      int s, m;  // get_scale_min_k4
      if (j < 4) {
        s = b.scales[j] & 63, m = b.scales[j + 4] & 63;
      } else {
        s = (b.scales[j + 4] & 0xF) | ((b.scales[j - 4] >> 6) << 4);
        m = (b.scales[j + 4] >> 4) | ((b.scales[j] >> 6) << 4);
      }
      CHECK(y[e] == 0.5f * float(s) * float(q) - 0.125f * float(m));
    }
  }
  {
    block_iq4_xs b{};
    for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
    for (auto& v : b.scales_l) v = static_cast<uint8_t>(rng());
    b.scales_h = static_cast<uint16_t>(rng());
    b.d = h(0.25f);
    dequantize_row(weight_type::iq4_xs, &b, y, 256);
    for (int e = 0; e < 256; ++e) {
      const int ib = e / 32, l = e % 32;
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t q = b.qs[16 * ib + l % 16];
      CHECK(y[e] == 0.25f * float(ls - 32) * float(iq4nl[l < 16 ? q & 0xF : q >> 4]));
    }
  }
}

TEST_CASE("new formats: quantizers that exist round-trip within their precision") {
  const auto x = normal_data(4096, 3);
  struct bound { weight_type t; double rel; };
  for (auto b : {bound{weight_type::q4_0, 0.14}, bound{weight_type::q4_1, 0.12}, bound{weight_type::q5_0, 0.07},
                 bound{weight_type::q5_1, 0.06}, bound{weight_type::q5_k, 0.05}, bound{weight_type::mxfp4, 0.20},
                 bound{weight_type::iq4_nl, 0.12}, bound{weight_type::iq4_xs, 0.12}, bound{weight_type::q2_k, 0.45},
                 bound{weight_type::q3_k, 0.25}}) {
    INFO(name_of(b.t));
    REQUIRE(has_quantizer(b.t));
    std::vector<uint8_t> q(row_bytes(b.t, 4096));
    std::vector<float> back(4096);
    quantize_row(b.t, x.data(), q.data(), 4096);
    dequantize_row(b.t, q.data(), back.data(), 4096);
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (double(back[i]) - x[i]) * (double(back[i]) - x[i]), ss += double(x[i]) * x[i];
    CHECK(std::sqrt(se / ss) < b.rel);
  }
  CHECK_FALSE(has_quantizer(weight_type::q4_k_x8));
}

// The generic dots: activations quantized to 8 bits (Q8_0 blocks for the 32-element formats,
// Q8_K for the super-block ones), so the tolerance is that of the Q8 activations, relative
// to |w| |x| per output; and every path (rows, tiles, matmul_reference) gives the same bits.
TEST_CASE("new formats: matmul against a double-precision reference, bit-identical across batch shapes") {
  std::mt19937 rng(11);
  for (auto t : new_types) {
    INFO(std::string(name_of(t)));
    const int64_t n_cols = block_elems(t) == 256 ? 768 : 288, n_rows = 11, n_x = 9;
    const size_t stride = row_bytes(t, n_cols) + 16;  // a stride longer than the row
    std::vector<uint8_t> w(stride * n_rows, 0xCD);
    std::vector<float> deq(static_cast<size_t>(n_rows * n_cols));
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto row = random_row(t, n_cols, rng);
      std::memcpy(w.data() + r * stride, row.data(), row.size());
      dequantize_row(t, row.data(), deq.data() + r * n_cols, n_cols);
    }
    const auto x = normal_data(static_cast<size_t>(n_x * n_cols), 12);
    std::vector<float> y(static_cast<size_t>(n_x * n_rows)), y_ref(y.size());
    matmul(t, w.data(), stride, n_cols, x.data(), n_x, y.data(), 0, n_rows, n_rows);
    matmul_reference(t, w.data(), stride, n_cols, x.data(), n_x, y_ref.data(), 0, n_rows, n_rows);
    for (int64_t b = 0; b < n_x; ++b) {
      std::vector<float> solo(static_cast<size_t>(n_rows));
      matmul(t, w.data(), stride, n_cols, x.data() + b * n_cols, 1, solo.data(), 0, n_rows, n_rows);
      for (int64_t r = 0; r < n_rows; ++r) {
        double ref = 0, wn = 0, xn = 0;
        for (int64_t j = 0; j < n_cols; ++j) {
          const double wv = deq[r * n_cols + j], xv = x[b * n_cols + j];
          ref += wv * xv, wn += wv * wv, xn += xv * xv;
        }
        const float got = y[b * n_rows + r];
        REQUIRE(std::fabs(got - ref) <= 3e-3 * std::sqrt(wn * xn));
        REQUIRE(same_bits(got, y_ref[b * n_rows + r]));
        REQUIRE(same_bits(got, solo[r]));
      }
    }
  }
}

// Every tile width (1..4 inputs per call, so 1..9 inputs leave every remainder), row ranges of
// every parity and odd block counts (an odd number of super-blocks; 32-element formats with a
// tail past whole groups of 8 blocks): each (row, input) has the bits of the scalar definition
// (matmul_reference). Q2_K / Q3_K tiles (AVX2, or AVX-512 where built) are checked here too.
TEST_CASE("new formats: every batch width and odd block counts give the scalar definition's bits") {
  std::mt19937 rng(17);
  for (auto t : new_types) {
    INFO(std::string(name_of(t)));
    for (int64_t n_blocks : {1, 5, 13}) {
      const int64_t n_cols = block_elems(t) * n_blocks, n_rows = 7;
      CAPTURE(n_cols);
      const size_t stride = row_bytes(t, n_cols);
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < n_rows; ++r) {
        const auto row = random_row(t, n_cols, rng);
        w.insert(w.end(), row.begin(), row.end());
      }
      auto x = normal_data(static_cast<size_t>(9 * n_cols), 18, 3.0f);
      x[5] = 1e3f;  // one input with a dominant element: its other quants are small
      std::vector<float> ref(static_cast<size_t>(9 * n_rows));
      matmul_reference(t, w.data(), stride, n_cols, x.data(), 9, ref.data(), 0, n_rows, n_rows);
      for (int64_t n_x = 1; n_x <= 9; ++n_x)
        for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, 7}, {1, 6}, {3, 4}}) {
          CAPTURE(n_x);
          CAPTURE(rb);
          std::vector<float> y(static_cast<size_t>(n_x * n_rows), NAN);
          matmul(t, w.data(), stride, n_cols, x.data(), n_x, y.data(), rb, re, n_rows);
          for (int64_t b = 0; b < n_x; ++b)
            for (int64_t r = rb; r < re; ++r) REQUIRE(same_bits(y[b * n_rows + r], ref[b * n_rows + r]));
        }
    }
  }
}

// Q3_K repacked into its 8-row layout (q3_k_x8, what the CPU model runs where the build has the
// AVX2 kernels; the AVX-512 VNNI ones where built, and scripts/test.sh's x86-64-v3 build runs the
// AVX2 ones): every batch width 1..9 (1..4 inputs per kernel call leave every remainder), row ranges
// that cut groups, odd super-block counts, one input with a dominant element. Its float steps are
// dot_q3_k_scalar's, so each (row, input) has the bits of the file layout's scalar definition, and
// those of the layout's own (dot_q3_k_x8_scalar).
TEST_CASE("Q3_K repacked (q3_k_x8): every batch width and odd block counts give the file layout's scalar bits") {
  if (preferred_layout(weight_type::q3_k, 16, 256) != weight_type::q3_k_x8) {
    MESSAGE("built without AVX2: q3_k_x8 is never chosen");
    return;
  }
  std::mt19937 rng(23);
  for (int64_t n_blocks : {1, 5, 13}) {
    const int64_t n_cols = qk_k * n_blocks, n_rows = 24;
    CAPTURE(n_cols);
    const size_t stride = row_bytes(weight_type::q3_k, n_cols);
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto row = random_row(weight_type::q3_k, n_cols, rng);
      w.insert(w.end(), row.begin(), row.end());
    }
    std::vector<uint8_t> x8(matrix_bytes(weight_type::q3_k_x8, n_rows, n_cols));
    repack(weight_type::q3_k, w.data(), n_rows, n_cols, weight_type::q3_k_x8, x8.data());
    const size_t stride8 = row_bytes(weight_type::q3_k_x8, n_cols);
    auto x = normal_data(static_cast<size_t>(9 * n_cols), 24, 3.0f);
    x[5] = 1e3f;
    std::vector<float> ref(static_cast<size_t>(9 * n_rows)), ref8(ref.size());
    matmul_reference(weight_type::q3_k, w.data(), stride, n_cols, x.data(), 9, ref.data(), 0, n_rows, n_rows);
    matmul_reference(weight_type::q3_k_x8, x8.data(), stride8, n_cols, x.data(), 9, ref8.data(), 0, n_rows, n_rows);
    for (size_t i = 0; i < ref.size(); ++i) REQUIRE(same_bits(ref8[i], ref[i]));
    for (int64_t n_x = 1; n_x <= 9; ++n_x)
      for (auto [rb, re] : {std::pair<int64_t, int64_t>{0, 24}, {1, 23}, {3, 4}, {8, 16}, {5, 19}}) {
        CAPTURE(n_x);
        CAPTURE(rb);
        CAPTURE(re);
        std::vector<float> y(static_cast<size_t>(n_x * n_rows), NAN);
        matmul(weight_type::q3_k_x8, x8.data(), stride8, n_cols, x.data(), n_x, y.data(), rb, re, n_rows);
        for (int64_t b = 0; b < n_x; ++b)
          for (int64_t r = 0; r < n_rows; ++r) {
            if (r < rb || r >= re) REQUIRE(std::isnan(y[b * n_rows + r]));
            else REQUIRE(same_bits(y[b * n_rows + r], ref[b * n_rows + r]));
          }
      }
  }
}

// Blocks written by llama.cpp's quantizer (ggml_quantize_chunk without an importance matrix, as
// llama-quantize) with ggml's own dequantized values: tests/unit/engine/data/ggml_blocks.bin,
// made by scripts/dev/ggml_blocks.sh. Dequantization must give ggml's values bit for bit; where
// the project has a quantizer, its bytes must be llama.cpp's too.
TEST_CASE("llama.cpp's quantized blocks: dequantized bit for bit, and the same bytes from our quantizers") {
  const auto path = agentq::test::source_dir() / "tests/unit/engine/data/ggml_blocks.bin";
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, path.string());
  const std::vector<uint8_t> buf{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    REQUIRE(at + n <= buf.size());
    std::memcpy(dst, buf.data() + at, n);
    at += n;
  };
  char magic[4];
  take(magic, 4);
  REQUIRE(std::string(magic, 4) == "AQGB");
  uint32_t count = 0;
  take(&count, 4);
  REQUIRE(count >= 10);
  int seen_new = 0;
  for (uint32_t k = 0; k < count; ++k) {
    uint32_t id = 0, n = 0, nb = 0;
    take(&id, 4);
    take(&n, 4);
    std::vector<float> x(n), want(n), got(n);
    take(x.data(), 4 * size_t(n));
    take(&nb, 4);
    std::vector<uint8_t> q(nb);
    take(q.data(), nb);
    take(want.data(), 4 * size_t(n));
    REQUIRE(is_weight_type(id));
    const auto t = static_cast<weight_type>(id);
    INFO(std::string(name_of(t)));
    for (auto nt : new_types) seen_new += nt == t;
    REQUIRE(row_bytes(t, n) == nb);
    dequantize_row(t, q.data(), got.data(), n);
    for (uint32_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(same_bits(got[i], want[i]));
    }
    if (has_quantizer(t)) {
      std::vector<uint8_t> ours(nb);
      quantize_row(t, x.data(), ours.data(), n);
      CHECK(ours == q);
    }
  }
  CHECK(seen_new == 10);
  CHECK(at == buf.size());
}
