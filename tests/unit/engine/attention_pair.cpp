// Decode attention of two GQA heads at once (attend_head_pair), and many queries of one head at
// once (attend, n_q > 1: the in-place tiles of attention_tiles.cpp, and the packed path, one
// query at a time over a F32 copy), against one at a time (attend): the same bits for F32 and F16 K/V, head dims 64
// and 128, any position (the 8-key groups and their tail), a sliding window, a soft-cap and
// per-head sinks.
#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "agentq/exp_avx2.h"
#include "agentq/kernels.h"
#include "kv/kv_store.h"
#include "model/attention.h"
#include "model/attention_simd.h"

using namespace agentq;

TEST_CASE("two heads of one K/V head at once give each head's own attention, bit for bit") {
  std::mt19937 rng(25);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (kv_dtype dt : {kv_dtype::f32, kv_dtype::f16}) {
    for (int32_t hd : {64, 128, 72}) {  // 72: no paired kernel, the two calls themselves
      kv_layout l;
      l.n_layer = 1;
      l.n_head_kv = 2;
      l.head_dim = hd;
      l.block_size = 16;
      l.dtype = dt;
      l.head_major = true;
      const int32_t n_blocks = 24;  // 384 positions
      kv_store kv(l, n_blocks);
      std::vector<int32_t> table(n_blocks);
      for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = n_blocks - 1 - i;  // not in order
      for (int32_t b = 0; b < n_blocks; ++b)
        for (int32_t i = 0; i < l.block_size * l.n_head_kv * hd; ++i) {
          const float kf = nd(rng), vf = nd(rng);
          if (dt == kv_dtype::f16) {
            kv.k<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(kf);
            kv.v<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(vf);
          } else {
            kv.k<float>(0, b)[i] = kf;
            kv.v<float>(0, b)[i] = vf;
          }
        }
      for (int variant = 0; variant < 4; ++variant) {  // plain, window, soft-cap, sinks
        for (int32_t pos : {0, 5, 7, 8, 15, 63, 100, 255, 383}) {
          INFO("dtype ", int(dt), " head_dim ", hd, " variant ", variant, " pos ", pos);
          attention_args a;
          a.kv = &kv;
          a.block_table = table.data();
          a.block_size = l.block_size;
          a.token_stride = l.token_stride();
          a.head_offset = int32_t(l.elem_offset(0, 1));
          a.head_dim = hd;
          a.scale = 0.125f;
          if (variant == 1) a.window = 40;
          if (variant == 2) a.softcap = 5.0f;
          attention_args b = a;
          if (variant == 3) {
            a.has_sink = b.has_sink = true;
            a.sink = 0.7f;
            b.sink = -1.3f;
          }
          std::vector<float> qa(static_cast<size_t>(hd)), qb(static_cast<size_t>(hd)),
              scores(static_cast<size_t>(pos) + 1);
          for (float& x : qa) x = nd(rng);
          for (float& x : qb) x = nd(rng);
          std::vector<float> one_a(static_cast<size_t>(hd)), one_b(static_cast<size_t>(hd)),
              pair_a(static_cast<size_t>(hd)), pair_b(static_cast<size_t>(hd));
          attend(a, qa.data(), 0, pos, 1, one_a.data(), 0, scores.data());
          attend(b, qb.data(), 0, pos, 1, one_b.data(), 0, scores.data());
          attend_head_pair(a, b, qa.data(), qb.data(), pos, pair_a.data(), pair_b.data(), scores.data());
          CHECK(std::memcmp(one_a.data(), pair_a.data(), sizeof(float) * static_cast<size_t>(hd)) == 0);
          CHECK(std::memcmp(one_b.data(), pair_b.data(), sizeof(float) * static_cast<size_t>(hd)) == 0);
        }
      }
    }
  }
}

// Many queries of one head at once (a verify pass, a prefill chunk: on AVX-512 the in-place
// tiles) against one query per call (decode's path), bit for bit: every n_q
// from 1 to 11 (pairs and a single left over), at positions that start and end inside
// and on the 8-key groups, F32 and F16 K/V, head dims 64 / 128 / 72 (no wide kernel),
// with and without a window.
TEST_CASE("n_q queries of one head at once give each query's own attention, bit for bit") {
  std::mt19937 rng(32);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (kv_dtype dt : {kv_dtype::f32, kv_dtype::f16}) {
    for (int32_t hd : {64, 128, 72}) {
      kv_layout l;
      l.n_layer = 1;
      l.n_head_kv = 1;
      l.head_dim = hd;
      l.block_size = 16;
      l.dtype = dt;
      l.head_major = true;
      const int32_t n_blocks = 12;  // 192 positions
      kv_store kv(l, n_blocks);
      std::vector<int32_t> table(n_blocks);
      for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = n_blocks - 1 - i;
      for (int32_t b = 0; b < n_blocks; ++b)
        for (int32_t i = 0; i < l.block_size * hd; ++i) {
          const float kf = nd(rng), vf = nd(rng);
          if (dt == kv_dtype::f16) {
            kv.k<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(kf);
            kv.v<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(vf);
          } else {
            kv.k<float>(0, b)[i] = kf;
            kv.v<float>(0, b)[i] = vf;
          }
        }
      for (int32_t window : {0, 40}) {
        for (int32_t pos0 : {0, 1, 3, 6, 8, 13, 64, 101, 170}) {
          for (int32_t n_q = 1; n_q <= 11 && pos0 + n_q <= 16 * n_blocks; ++n_q) {
            INFO("dtype ", int(dt), " head_dim ", hd, " window ", window, " pos0 ", pos0, " n_q ", n_q);
            attention_args a;
            a.kv = &kv;
            a.block_table = table.data();
            a.block_size = l.block_size;
            a.token_stride = l.token_stride();
            a.head_offset = 0;
            a.head_dim = hd;
            a.scale = 0.125f;
            a.window = window;
            std::vector<float> q(size_t(n_q) * hd), many(size_t(n_q) * hd), one(size_t(n_q) * hd),
                scores(size_t(pos0 + n_q));
            for (float& x : q) x = nd(rng);
            attend(a, q.data(), hd, pos0, n_q, many.data(), hd, scores.data());
            for (int32_t j = 0; j < n_q; ++j)
              attend(a, q.data() + j * hd, hd, pos0 + j, 1, one.data() + j * hd, hd, scores.data());
            CHECK(std::memcmp(many.data(), one.data(), sizeof(float) * many.size()) == 0);
          }
        }
      }
    }
  }
}

// The in-place many-query kernel (attend_tiles: a verify pass, a prefill run) and the packed path
// (attn::tiles_min_queries raised: what AVX2-only builds run), each against one query per call, bit
// for bit: n_q 1..40 (odd and even pair counts, two blocks of 32), positions inside and on the
// 8-key tiles and the 32-row V tiles, F32 and F16 K/V, head dims 64 / 128 / 72, plain, a
// window, a soft-cap, a sink, and an infinite V element at the last position (only the last
// query reads it: the others must stay finite, as their own calls, which never read that row).
TEST_CASE("n_q queries over the cache in place give each query's own attention, bit for bit") {
  std::mt19937 rng(47);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (kv_dtype dt : {kv_dtype::f32, kv_dtype::f16}) {
    for (int32_t hd : {64, 128, 72}) {
      kv_layout l;
      l.n_layer = 1;
      l.n_head_kv = 2;
      l.head_dim = hd;
      l.block_size = 16;
      l.dtype = dt;
      l.head_major = true;
      const int32_t n_blocks = 8;  // 128 positions
      kv_store kv(l, n_blocks);
      std::vector<int32_t> table(n_blocks);
      for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = (i * 3) % n_blocks;  // not in order
      auto put = [&](bool v, int32_t pos, int32_t d, float x) {
        const int64_t o = l.elem_offset(pos % l.block_size, 1) + d;
        const int32_t b = table[size_t(pos / l.block_size)];
        if (dt == kv_dtype::f16)
          (v ? kv.v<uint16_t>(0, b) : kv.k<uint16_t>(0, b))[o] = kernels::fp32_to_fp16(x);
        else
          (v ? kv.v<float>(0, b) : kv.k<float>(0, b))[o] = x;
      };
      for (int32_t pos = 0; pos < 16 * n_blocks; ++pos)
        for (int32_t d = 0; d < hd; ++d) {
          put(false, pos, d, nd(rng));
          put(true, pos, d, nd(rng));
        }
      for (int variant = 0; variant < 5; ++variant) {  // plain, window, soft-cap, sink, infinite V
        for (int32_t pos0 : {0, 3, 8, 29, 31, 57, 87}) {
          for (int32_t n_q : {1, 2, 3, 5, 8, 13, 17, 24, 32, 33, 40}) {
            if (pos0 + n_q > 16 * n_blocks) continue;
            attention_args a;
            a.kv = &kv;
            a.block_table = table.data();
            a.block_size = l.block_size;
            a.token_stride = l.token_stride();
            a.head_offset = int32_t(l.elem_offset(0, 1));
            a.head_dim = hd;
            a.scale = 0.125f;
            if (variant == 1) a.window = 20;
            if (variant == 2) a.softcap = 4.0f;
            if (variant == 3) {
              a.has_sink = true;
              a.sink = 1.1f;
            }
            if (variant == 4) put(true, pos0 + n_q - 1, 5, INFINITY);
            std::vector<float> q(size_t(n_q) * hd), one(size_t(n_q) * hd), scores(size_t(pos0 + n_q));
            for (float& x : q) x = nd(rng);
            for (int32_t j = 0; j < n_q; ++j)
              attend(a, q.data() + j * hd, hd, pos0 + j, 1, one.data() + j * hd, hd, scores.data());
            for (int32_t min_q : {1, INT32_MAX}) {  // tiles; the packed path
              INFO("dtype ", int(dt), " head_dim ", hd, " variant ", variant, " pos0 ", pos0, " n_q ", n_q,
                   " tiles_min_queries ", min_q);
              const int32_t saved = attn::tiles_min_queries;
              attn::tiles_min_queries = min_q;
              std::vector<float> many(size_t(n_q) * hd);
              attend(a, q.data(), hd, pos0, n_q, many.data(), hd, scores.data());
              attn::tiles_min_queries = saved;
              CHECK(std::memcmp(many.data(), one.data(), sizeof(float) * many.size()) == 0);
              if (variant == 4) {
                bool finite = true;  // every query but the last
                for (size_t i = 0; i + hd < many.size(); ++i) finite = finite && std::isfinite(many[i]);
                CHECK(finite);
              }
            }
            if (variant == 4) put(true, pos0 + n_q - 1, 5, nd(rng));
          }
        }
      }
    }
  }
}

// Small head dims (a tiny model: stories260K's head_dim 8; many queries take
// attention_small.cpp, keys in the lanes, two queries' scores per zmm on AVX-512 builds), against
// one query per call, bit for bit: n_q 1..40 (8-query V blocks and their 4/2/1 rest, query pairs
// and an odd one), with attn::small_min_queries at its default and at 2, positions inside and on
// the 8-key groups up to 250 (blocks of 16, out of order; its K/V rows read group by group) and
// past 512 keys (read through the prefetching row walk),
// F32 and F16 K/V, the second of 2 K/V heads, plain, a window (not taken: the one-query path),
// a soft-cap, a sink and an infinite V element at the last position; head_dim 16 as well (no
// small kernel: the packed path).
TEST_CASE("n_q queries of a small head (head_dim 8) give each query's own attention, bit for bit") {
  std::mt19937 rng(83);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (kv_dtype dt : {kv_dtype::f32, kv_dtype::f16}) {
    for (int32_t hd : {8, 16}) {
      kv_layout l;
      l.n_layer = 1;
      l.n_head_kv = 2;
      l.head_dim = hd;
      l.block_size = 16;
      l.dtype = dt;
      l.head_major = true;
      const int32_t n_blocks = 36;  // 576 positions
      kv_store kv(l, n_blocks);
      std::vector<int32_t> table(n_blocks);
      for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = (i * 5) % n_blocks;  // not in order
      auto put = [&](bool v, int32_t pos, int32_t d, float x) {
        const int64_t o = l.elem_offset(pos % l.block_size, 1) + d;
        const int32_t b = table[size_t(pos / l.block_size)];
        if (dt == kv_dtype::f16)
          (v ? kv.v<uint16_t>(0, b) : kv.k<uint16_t>(0, b))[o] = kernels::fp32_to_fp16(x);
        else
          (v ? kv.v<float>(0, b) : kv.k<float>(0, b))[o] = x;
      };
      for (int32_t pos = 0; pos < 16 * n_blocks; ++pos)
        for (int32_t d = 0; d < hd; ++d) {
          put(false, pos, d, 2.0f * nd(rng));
          put(true, pos, d, nd(rng));
        }
      for (int variant = 0; variant < 5; ++variant) {  // plain, window, soft-cap, sink, infinite V
        for (int32_t pos0 : {0, 1, 7, 8, 19, 37, 64, 213, 250, 505, 530}) {
          for (int32_t n_q : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 19, 24, 31, 32, 38}) {
            if (pos0 + n_q > 16 * n_blocks) continue;
            attention_args a;
            a.kv = &kv;
            a.block_table = table.data();
            a.block_size = l.block_size;
            a.token_stride = l.token_stride();
            a.head_offset = int32_t(l.elem_offset(0, 1));
            a.head_dim = hd;
            a.scale = 1.0f / std::sqrt(float(hd));
            if (variant == 1) a.window = 20;
            if (variant == 2) a.softcap = 4.0f;
            if (variant == 3) {
              a.has_sink = true;
              a.sink = 1.1f;
            }
            if (variant == 4) put(true, pos0 + n_q - 1, 5, INFINITY);
            std::vector<float> q(size_t(n_q) * hd), one(size_t(n_q) * hd), scores(size_t(pos0 + n_q));
            for (float& x : q) x = nd(rng);
            for (int32_t j = 0; j < n_q; ++j)
              attend(a, q.data() + j * hd, hd, pos0 + j, 1, one.data() + j * hd, hd, scores.data());
            for (int32_t min_q : {attn::small_min_queries, 2}) {
              INFO("dtype ", int(dt), " head_dim ", hd, " variant ", variant, " pos0 ", pos0, " n_q ", n_q,
                   " small_min_queries ", min_q);
              const int32_t saved = attn::small_min_queries;
              attn::small_min_queries = min_q;
              std::vector<float> many(size_t(n_q) * hd);
              attend(a, q.data(), hd, pos0, n_q, many.data(), hd, scores.data());
              attn::small_min_queries = saved;
              CHECK(std::memcmp(many.data(), one.data(), sizeof(float) * many.size()) == 0);
              if (variant == 4) {
                bool finite = true;  // every query but the last
                for (size_t i = 0; i + hd < many.size(); ++i) finite = finite && std::isfinite(many[i]);
                CHECK(finite);
              }
            }
            if (variant == 4) put(true, pos0 + n_q - 1, 5, nd(rng));
          }
        }
      }
    }
  }
}

#if defined(__AVX512F__)
// The softmax's 16-wide exp (every attention kernel's, AVX-512 builds) against the 8-wide one it
// stands in for, bit for bit: a sweep of the clamp range and past it, specials included.
TEST_CASE("exp_avx512 gives exp_avx2's bits lane for lane") {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, -87.0f, -87.00001f, 88.0f, 88.00001f, 1e-30f, -1e-30f, 1e-45f, INFINITY, -INFINITY,
                  std::nanf("")})
    x.push_back(v);
  while (x.size() % 16) x.push_back(1.0f);
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); i += 16) {
    float wide[16], narrow[16];
    _mm512_storeu_ps(wide, kernels::exp_avx512(_mm512_loadu_ps(x.data() + i)));
    _mm256_storeu_ps(narrow, kernels::exp_avx2(_mm256_loadu_ps(x.data() + i)));
    _mm256_storeu_ps(narrow + 8, kernels::exp_avx2(_mm256_loadu_ps(x.data() + i + 8)));
    differ += std::memcmp(wide, narrow, sizeof wide) != 0;
  }
  CHECK(differ == 0);
}
#endif
