// The plain C++ references behind the CUDA kernels (kernels/cuda/*.cpp), checked
// on the CPU against hand-built blocks, independent formulas and naive loops, so
// the code the GPU tests trust is itself exercised in every build.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"
#include "cuda_test_data.h"

using namespace agentq;
namespace ref = agentq::kernels::ref;
using kernels::cuda::weight_type;
using test::rel_err;

TEST_CASE("philox4x32-10 matches Random123's known-answer vectors") {
  struct kat { uint32_t ctr[4], key[2], out[4]; };
  const kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kats) {
    uint32_t out[4];
    ref::philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) CHECK(out[i] == k.out[i]);
  }
  const float u = ref::philox_uniform(7, 3);
  CHECK(u >= 0.0f);
  CHECK(u < 1.0f);
  CHECK(ref::philox_uniform(7, 3) == u);
  CHECK(ref::philox_uniform(7, 4) != u);
}

TEST_CASE("dequantize: hand-built Q8_0 and Q4_K blocks") {
  uint8_t q8[34];
  const uint16_t d = kernels::fp32_to_fp16(0.5f);
  std::memcpy(q8, &d, 2);
  for (int j = 0; j < 32; ++j) q8[2 + j] = uint8_t(int8_t(j - 16));
  float y[256];
  ref::dequantize(weight_type::q8_0, q8, y, 32);
  for (int j = 0; j < 32; ++j) CHECK(y[j] == 0.5f * float(j - 16));

  // d = 1, dmin = 0.5; sub-blocks 0-3: scale 2, min 3; sub-blocks 4-7: scale 5, min 1; every qs byte 0x73.
  uint8_t q4[144] = {};
  const uint16_t one = kernels::fp32_to_fp16(1.0f), half = kernels::fp32_to_fp16(0.5f);
  std::memcpy(q4, &one, 2);
  std::memcpy(q4 + 2, &half, 2);
  for (int j = 0; j < 4; ++j) q4[4 + j] = 2, q4[8 + j] = 3, q4[12 + j] = 0x15;
  std::memset(q4 + 16, 0x73, 128);
  ref::dequantize(weight_type::q4_k, q4, y, 256);
  for (int i = 0; i < 256; ++i) {
    const bool hi = (i % 64) >= 32, late = i >= 128;
    const float expect = late ? (hi ? 34.5f : 14.5f) : (hi ? 12.5f : 4.5f);
    CHECK(y[i] == expect);
  }
}

// Element i of a K-quant block, from the ggml layout description, element by element.
static float q6_k_elem(const uint8_t* b, int i) {
  const int n = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t ql = b[64 * n + l + 32 * (quarter & 1)];
  const int lo = quarter >= 2 ? ql >> 4 : ql & 0xF;
  const int q = (lo | (((b[128 + 32 * n + l] >> (2 * quarter)) & 3) << 4)) - 32;
  uint16_t d;
  std::memcpy(&d, b + 208, 2);
  return kernels::fp16_to_fp32(d) * float(int8_t(b[192 + 8 * n + l / 16 + 2 * quarter])) * float(q);
}
static float q4_k_elem(const uint8_t* b, int i) {
  const int j = i / 64, hi = (i % 64) / 32, l = i % 32, is = 2 * j + hi;
  const uint8_t* s = b + 4;
  const int sc = is < 4 ? s[is] & 63 : (s[is + 4] & 0xF) | ((s[is - 4] >> 6) << 4);
  const int m = is < 4 ? s[is + 4] & 63 : (s[is + 4] >> 4) | ((s[is] >> 6) << 4);
  const int q = hi ? b[16 + 32 * j + l] >> 4 : b[16 + 32 * j + l] & 0xF;
  uint16_t d, dmin;
  std::memcpy(&d, b, 2);
  std::memcpy(&dmin, b + 2, 2);
  return kernels::fp16_to_fp32(d) * float(sc) * float(q) - kernels::fp16_to_fp32(dmin) * float(m);
}

TEST_CASE("dequantize: random Q4_K / Q6_K blocks agree with an element-wise decoding") {
  std::mt19937 rng(1);
  for (weight_type t : {weight_type::q4_k, weight_type::q6_k}) {
    const auto w = test::random_weights(t, 3, 512, rng);
    std::vector<float> y(3 * 512);
    ref::dequantize(t, w.data(), y.data(), 3 * 512);
    for (int b = 0; b < 6; ++b)
      for (int i = 0; i < 256; ++i) {
        const float e = t == weight_type::q4_k ? q4_k_elem(w.data() + 144 * b, i) : q6_k_elem(w.data() + 210 * b, i);
        REQUIRE(std::abs(y[size_t(256 * b + i)] - e) <= 1e-6f * std::max(1.0f, std::abs(e)));
      }
  }
}

TEST_CASE("matvec and embedding references agree with dequantize + naive loops") {
  std::mt19937 rng(2);
  for (weight_type t : {weight_type::f32, weight_type::f16, weight_type::bf16, weight_type::q8_0, weight_type::q4_k,
                        weight_type::q6_k, weight_type::q4_0, weight_type::q4_1, weight_type::q5_0, weight_type::q5_1,
                        weight_type::q2_k, weight_type::q3_k, weight_type::q5_k, weight_type::iq4_nl, weight_type::iq4_xs,
                        weight_type::mxfp4}) {
    const int64_t n_out = 7, n_in = 512;
    const auto w = test::random_weights(t, n_out, n_in, rng);
    const auto x = test::random_floats(size_t(3 * n_in), rng);
    std::vector<float> y(size_t(3 * n_out)), wf(size_t(n_out * n_in));
    ref::matvec(t, w.data(), n_out, n_in, x.data(), 3, y.data());
    ref::dequantize(t, w.data(), wf.data(), n_out * n_in);
    for (int i = 0; i < 3; ++i)
      for (int64_t o = 0; o < n_out; ++o) {
        float s = 0;
        for (int64_t k = 0; k < n_in; ++k) s += wf[size_t(o * n_in + k)] * x[size_t(i * n_in + k)];
        CHECK(std::abs(s - y[size_t(i * n_out + o)]) <= 1e-4f * (1.0f + std::abs(s)));
      }
    const int32_t ids[] = {6, 0, 6};
    std::vector<float> e(3 * n_in);
    ref::embedding(t, w.data(), ids, 3, int32_t(n_in), e.data());
    CHECK(std::memcmp(e.data(), wf.data() + 6 * n_in, n_in * 4) == 0);
    CHECK(std::memcmp(e.data() + n_in, wf.data(), n_in * 4) == 0);
  }
}

TEST_CASE("rms_norm, swiglu, rope references") {
  std::mt19937 rng(3);
  const int n = 96;
  const auto x = test::random_floats(2 * n, rng), w = test::random_floats(n, rng);
  std::vector<float> y(2 * n);
  ref::rms_norm(x.data(), w.data(), y.data(), 2, n, 1e-5f);
  for (int r = 0; r < 2; ++r) {
    float ss = 0;
    for (int i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const float inv = 1.0f / std::sqrt(ss / n + 1e-5f);
    for (int i = 0; i < n; ++i) CHECK(y[r * n + i] == doctest::Approx(x[r * n + i] * inv * w[i]).epsilon(1e-5));
  }

  std::vector<float> out(n);
  ref::swiglu(x.data(), w.data(), out.data(), n);
  for (int i = 0; i < n; ++i) CHECK(out[i] == doctest::Approx(x[i] / (1 + std::exp(-x[i])) * w[i]).epsilon(1e-5));

  // RoPE: position 0 is the identity; rotations keep each pair's norm; neox pairs (i, i + n_rot/2).
  const int head_dim = 64, n_rot = 32;
  for (bool neox : {false, true}) {
    auto v = test::random_floats(2 * head_dim, rng);
    auto r = v;
    const int32_t pos[] = {0, 1000};
    ref::rope(r.data(), pos, 2, 1, head_dim, n_rot, 10000.0f, 1.0f, neox);
    // Freq factors divide the angle: factor 2 at position 2000 equals no factor at 1000.
    auto r2 = v;
    const std::vector<float> twos(n_rot / 2, 2.0f);
    const int32_t pos2[] = {0, 2000};
    ref::rope(r2.data(), pos2, 2, 1, head_dim, n_rot, 10000.0f, 1.0f, neox, twos.data());
    for (int i = 0; i < 2 * head_dim; ++i) CHECK(r2[size_t(i)] == doctest::Approx(r[size_t(i)]).epsilon(1e-6));
    for (int i = 0; i < head_dim; ++i) CHECK(r[i] == v[i]);
    for (int i = n_rot; i < head_dim; ++i) CHECK(r[head_dim + i] == v[head_dim + i]);
    for (int i = 0; i < n_rot / 2; ++i) {
      const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const double theta = 1000.0 * std::pow(10000.0, -2.0 * i / n_rot);
      const float* o = v.data() + head_dim;
      CHECK(r[head_dim + a] == doctest::Approx(o[a] * std::cos(theta) - o[b] * std::sin(theta)).epsilon(1e-5));
      CHECK(r[head_dim + b] == doctest::Approx(o[a] * std::sin(theta) + o[b] * std::cos(theta)).epsilon(1e-5));
    }
  }
}

// Single-pass softmax attention of one query over positions [0, len).
static void naive_attention(const float* q, const test::paged_fixture& f, int32_t seq, int32_t len, int32_t kvh,
                            float scale, float* out) {
  const int32_t row = f.n_head_kv * f.head_dim;
  std::vector<double> s(static_cast<size_t>(len));
  double m = -1e300, l = 0;
  auto at = [&](const std::vector<float>& c, int32_t p) {
    return c.data() + (int64_t(f.block_tables[size_t(seq * f.max_blocks + p / f.block_size)]) * f.block_size +
                       p % f.block_size) * row + kvh * f.head_dim;
  };
  for (int32_t p = 0; p < len; ++p) {
    double d = 0;
    for (int32_t i = 0; i < f.head_dim; ++i) d += double(q[i]) * at(f.k, p)[i];
    s[size_t(p)] = d * scale;
    m = std::max(m, s[size_t(p)]);
  }
  std::vector<double> acc(size_t(f.head_dim), 0.0);
  for (int32_t p = 0; p < len; ++p) {
    const double e = std::exp(s[size_t(p)] - m);
    l += e;
    for (int32_t i = 0; i < f.head_dim; ++i) acc[size_t(i)] += e * at(f.v, p)[i];
  }
  for (int32_t i = 0; i < f.head_dim; ++i) out[i] = float(acc[size_t(i)] / l);
}

TEST_CASE("attention references: split-K decode and causal prefill equal a single softmax") {
  std::mt19937 rng(4);
  const std::vector<int32_t> lens = {1, 513, 1100};
  const int32_t n_head = 4, n_head_kv = 2, head_dim = 32, block_size = 16;
  test::paged_fixture f(lens, n_head_kv, head_dim, block_size, rng);
  const float scale = 1.0f / std::sqrt(float(head_dim));
  const auto q = test::random_floats(lens.size() * n_head * head_dim, rng);
  std::vector<float> out(q.size()), expect(q.size());
  ref::attention_decode(q.data(), f.k.data(), f.v.data(), f.block_tables.data(), f.max_blocks, lens.data(),
                        int32_t(lens.size()), n_head, n_head_kv, head_dim, block_size, scale, out.data());
  for (size_t s = 0; s < lens.size(); ++s)
    for (int32_t h = 0; h < n_head; ++h)
      naive_attention(q.data() + (s * n_head + h) * head_dim, f, int32_t(s), lens[s], h / (n_head / n_head_kv), scale,
                      expect.data() + (s * n_head + h) * head_dim);
  CHECK(rel_err(out, expect) < 1e-6);

  // Prefill: seq 2's last 40 tokens after n_past = 1060; row j sees positions [0, 1060 + j].
  const int32_t n_past = 1060, n_q = 40;
  const auto qp = test::random_floats(size_t(n_q * n_head * head_dim), rng);
  std::vector<float> outp(qp.size()), expp(qp.size());
  const int32_t q_start[] = {0, n_q};
  ref::attention_prefill(qp.data(), f.k.data(), f.v.data(), f.block_tables.data() + 2 * f.max_blocks, f.max_blocks,
                         q_start, &n_past, 1, n_head, n_head_kv, head_dim, block_size, scale, outp.data());
  for (int32_t j = 0; j < n_q; ++j)
    for (int32_t h = 0; h < n_head; ++h)
      naive_attention(qp.data() + (j * n_head + h) * head_dim, f, 2, n_past + j + 1, h / (n_head / n_head_kv), scale,
                      expp.data() + (j * n_head + h) * head_dim);
  CHECK(rel_err(outp, expp) < 1e-6);
}

TEST_CASE("kv_write reference lands each token at block_table[p / bs], slot p % bs") {
  const int32_t row = 3, bs = 4;
  const int32_t tables[] = {5, 2, 0, 1};  // two seqs, max_blocks 2
  const int32_t pos[] = {0, 5, 3}, tok_seq[] = {0, 0, 1};
  std::vector<float> k_new(3 * row), v_new(3 * row), k(6 * bs * row, 0.0f), v(6 * bs * row, 0.0f);
  for (int i = 0; i < 3 * row; ++i) k_new[size_t(i)] = float(i + 1), v_new[size_t(i)] = -float(i + 1);
  ref::kv_write(k_new.data(), v_new.data(), pos, tok_seq, tables, 2, 3, row, bs, k.data(), v.data());
  CHECK(k[size_t((5 * bs + 0) * row)] == 1.0f);     // seq 0, pos 0 -> block 5 slot 0
  CHECK(k[size_t((2 * bs + 1) * row + 2)] == 6.0f);  // seq 0, pos 5 -> block 2 slot 1
  CHECK(v[size_t((0 * bs + 3) * row)] == -7.0f);     // seq 1, pos 3 -> block 0 slot 3
}

TEST_CASE("sampling reference: greedy cases, top-k/top-p support, softmax frequencies, token mask") {
  std::mt19937 rng(5);
  auto l = test::random_floats(1000, rng, -4.0f, 4.0f);
  const int32_t amax = ref::argmax_row(l.data(), 1000);
  for (int i = 0; i < 1000; ++i) CHECK(l[size_t(i)] <= l[size_t(amax)]);
  kernels::cuda::sample_params p;
  p.temperature = 0.0f;
  CHECK(ref::sample_row(l.data(), 1000, p) == amax);
  p.temperature = 1.0f;
  p.top_k = 1;
  CHECK(ref::sample_row(l.data(), 1000, p) == amax);
  p.top_k = 0;
  p.top_p = 1e-6f;
  CHECK(ref::sample_row(l.data(), 1000, p) == amax);

  std::vector<int32_t> order(1000);
  for (int i = 0; i < 1000; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
  p.top_p = 1.0f;
  p.top_k = 5;
  for (uint64_t c = 0; c < 200; ++c) {
    p.counter = c;
    const int32_t t = ref::sample_row(l.data(), 1000, p);
    CHECK(std::find(order.begin(), order.begin() + 5, t) != order.begin() + 5);
  }

  // Four tokens, T = 1: frequencies follow the softmax.
  const float small[] = {0.0f, 1.0f, 2.0f, -INFINITY};
  p = {};
  p.seed = 99;
  std::map<int32_t, int> hits;
  const int n_draws = 20000;
  for (int c = 0; c < n_draws; ++c) {
    p.counter = uint64_t(c);
    ++hits[ref::sample_row(small, 4, p)];
  }
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  CHECK(hits[3] == 0);
  for (int t = 0; t < 3; ++t) CHECK(double(hits[t]) / n_draws == doctest::Approx(std::exp(double(t)) / z).epsilon(0.05));
  // top_p = 0.5 keeps only token 2 (p = 0.665); 0.8 keeps tokens 1 and 2 (0.665 + 0.245).
  p.top_p = 0.5f;
  for (int c = 0; c < 50; ++c) {
    p.counter = uint64_t(c);
    CHECK(ref::sample_row(small, 4, p) == 2);
  }
  p.top_p = 0.8f;
  for (int c = 0; c < 200; ++c) {
    p.counter = uint64_t(c);
    CHECK(ref::sample_row(small, 4, p) >= 1);
  }

  std::vector<float> m(70, 1.0f);
  const uint32_t mask[] = {0x00000005u, 0u, 0x20u};  // tokens 0, 2 and 69 allowed
  ref::apply_token_mask(m.data(), mask, 1, 70);
  for (int t = 0; t < 70; ++t) CHECK((m[size_t(t)] == 1.0f) == (t == 0 || t == 2 || t == 69));
}

TEST_CASE("the CUDA failed flag keeps the first reason") {
  CHECK_FALSE(kernels::cuda::cuda_failed());
  kernels::cuda::set_cuda_failed("first");
  kernels::cuda::set_cuda_failed("second");
  CHECK(kernels::cuda::cuda_failed());
  CHECK(std::string(kernels::cuda::cuda_failed_reason()) == "first");
}
