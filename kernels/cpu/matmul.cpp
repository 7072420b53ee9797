// Matrix products W[n_rows][n_cols] x X[n_x][n_cols]^T for every weight format: one
// fixed-order dot per format, run by AVX2/FMA/F16C rows kernels (one input) and
// register-blocked micro-kernels (R rows x B inputs), or by scalar tiles of 1 row x B
// inputs without AVX2; blocked so a weight row is read from memory once per input block.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define AGENTQ_KERNELS_AVX2 1
#endif

#include "agentq/kernels.h"
#include "cpu/check.h"
#include "cpu/quants_internal.h"
#include "cpu/repack.h"
#include "cpu/rows_avx2.h"
#include "cpu/tiles_avx2.h"
#include "cpu/tiles_avx512.h"
#include "cpu/x8_avx2.h"
#include "cpu/x8_avx512.h"
#include "cpu/x8_more_avx2.h"
#include "cpu/x8_more_avx512.h"

namespace agentq::kernels {

using detail::block_q8_0x;
using detail::block_q8_k;

namespace {

// A scalar tile (the path without AVX2): one weight row against B activation vectors;
// out[b] = dot(w, x[b]), for each b exactly the operations of B == 1.
using tile_fn = void (*)(const uint8_t* w, const uint8_t* const* x, int64_t n_cols, float* out);

// ============================================================================
// Scalar dot products (the reference path, and the fallback without AVX2)
// Float formats: one accumulator of 8 lanes, element j -> lane j % 8 over whole 8-element
// chunks, lanes reduced as hsum8's tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the
// scalar tail added. One chain per (row, input) is what lets the batched micro-kernel keep
// a single register per output (see mk_float_avx2).

template <class Get>
float dot_float_scalar(Get get, const float* x, int64_t n) {
  float acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += get(j + l) * x[j + l];
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = acc[l] + acc[l + 4];
  float r = (t[0] + t[2]) + (t[1] + t[3]);
  float tail = 0;
  for (; j < n; ++j) tail += get(j) * x[j];
  return r + tail;
}

float dot_f32_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wf = reinterpret_cast<const float*>(w);
  return dot_float_scalar([wf](int64_t j) { return wf[j]; }, reinterpret_cast<const float*>(x), n);
}
float dot_f16_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wh = reinterpret_cast<const uint16_t*>(w);
  return dot_float_scalar([wh](int64_t j) { return fp16_to_fp32(wh[j]); }, reinterpret_cast<const float*>(x), n);
}
float dot_bf16_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wh = reinterpret_cast<const uint16_t*>(w);
  return dot_float_scalar([wh](int64_t j) { return bf16_to_fp32(wh[j]); }, reinterpret_cast<const float*>(x), n);
}

// Q8_0 x Q8_0: exact int32 per block, then two float accumulators (even/odd blocks).
float dot_q8_0_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q8_0*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  float acc[2] = {0, 0};
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    int32_t s = 0;
    for (int j = 0; j < qk8_0; ++j) s += wb[i].qs[j] * xb[i].qs[j];
    acc[i & 1] += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(s);
  }
  return acc[0] + acc[1];
}

// Q4_K x Q8_K: exact int32 per super-block for the scaled quants and for the mins.
float dot_q4_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q4_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0, acc_m = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < qk_k / 32; ++j) {
      uint8_t sc, m;
      detail::get_scale_min_k4(j, wb[i].scales, &sc, &m);
      const uint8_t* q = wb[i].qs + 32 * (j / 2);
      const int8_t* y = xb[i].qs + 32 * j;
      int32_t s = 0;
      if (j % 2 == 0) {
        for (int l = 0; l < 32; ++l) s += (q[l] & 0xF) * y[l];
      } else {
        for (int l = 0; l < 32; ++l) s += (q[l] >> 4) * y[l];
      }
      isum += sc * s;
      msum += m * (xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1]);
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
    acc_m += (-fp16_to_fp32(wb[i].dmin) * xb[i].d) * static_cast<float>(msum);
  }
  return acc + acc_m;
}

// Q6_K x Q8_K: exact int32 per super-block.
float dot_q6_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q6_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const uint8_t* ql = wb[i].ql;
    const uint8_t* qh = wb[i].qh;
    const int8_t* sc = wb[i].scales;
    const int8_t* y = xb[i].qs;
    int32_t isum = 0;
    for (int j = 0; j < qk_k; j += 128) {
      int32_t s[8] = {};
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        s[is + 0] += q1 * y[l + 0];
        s[is + 2] += q2 * y[l + 32];
        s[is + 4] += q3 * y[l + 64];
        s[is + 6] += q4 * y[l + 96];
      }
      for (int k = 0; k < 8; ++k) isum += sc[k] * s[k];
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
  }
  return acc;
}

using detail::dot_fn;

dot_fn scalar_dot(weight_type t) {
  switch (t) {
    case weight_type::f32: return dot_f32_scalar;
    case weight_type::f16: return dot_f16_scalar;
    case weight_type::bf16: return dot_bf16_scalar;
    case weight_type::q8_0: return dot_q8_0_scalar;
    case weight_type::q4_k: return dot_q4_k_scalar;
    case weight_type::q6_k: return dot_q6_k_scalar;
    case weight_type::q8_0_x8: case weight_type::q4_k_x8: case weight_type::q6_k_x8: break;  // run_x8
    default:
      if (dot_fn d = detail::dot_more_scalar(t)) return d;
      break;
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return nullptr;
}

template <dot_fn Dot, int B>
void tile_scalar(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  for (int b = 0; b < B; ++b) out[b] = Dot(w, x[b], n);
}

#if AGENTQ_KERNELS_AVX2
using namespace avx2;  // mk_*_avx2 (tiles_avx2.h), rows_*_avx2 (rows_avx2.h)
#endif

constexpr int max_tile = 4;

constexpr int max_rows = 4;

// R consecutive rows (row_stride apart) against one input: out[r] = dot(W[r], x).
using rows_fn = void (*)(const uint8_t* w, size_t row_stride, const uint8_t* x, int64_t n_cols, float* out);

// A register-blocked micro-kernel: R consecutive rows (row_stride apart) x B inputs,
// out[r * B + b] = dot(W[r], x[b]), per pair bit-identical to the rows kernel (n_x == 1).
using mk_fn = void (*)(const uint8_t* w, size_t row_stride, const uint8_t* const* x, int64_t n_cols, float* out);
constexpr int max_mk_rows = 8, max_mk_inputs = 8;

struct tile_set {
  // Scalar sets: tiles only. AVX2 sets: rows kernels for one input, micro-kernels otherwise.
  int max_b = 0;                   // widest tile
  tile_fn fn[max_tile + 1] = {};   // fn[b] handles b inputs, 1 <= b <= max_b
  rows_fn rows[max_rows + 1] = {}; // rows[k] handles k rows of one input; all null: use fn[1]
  // mk[r][b]: r rows x b inputs (1 <= r <= mk_r, 1 <= b <= mk_b); mk_r == 0: tiles only
  int mk_r = 0, mk_b = 0;
  mk_fn mk[max_mk_rows + 1][max_mk_inputs + 1] = {};
};

template <template <int> class T>
constexpr tile_set make_set(int max_b) {
  return {max_b, {nullptr, T<1>::f, T<2>::f, T<3>::f, T<4>::f}, {}};
}

template <template <int> class R>
constexpr tile_set rows_set() {
  return {0, {}, {nullptr, R<1>::f, R<2>::f, R<3>::f, R<4>::f}};
}

template <dot_fn D>
struct scalar_tiles {
  template <int B>
  struct t { static constexpr tile_fn f = tile_scalar<D, B>; };
};

#if AGENTQ_DOTS_MORE_AVX2
// AVX2 tiles (32-element formats, Q5_K, IQ4_XS): one row's blocks unpacked once for up to 4 inputs.
template <weight_type T>
struct more_avx2_tiles {
  template <int B>
  struct t {
    static void run(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
      detail::tile_more_avx2(T, w, x, n, out, B);
    }
    static constexpr tile_fn f = run;
  };
};
#endif

// The quants_more formats: tiles of 1 row x up to 4 inputs over their generic dots.
tile_set more_set(weight_type t) {
#if AGENTQ_DOTS_MORE_AVX2
  switch (t) {
    case weight_type::q4_0: return make_set<more_avx2_tiles<weight_type::q4_0>::t>(4);
    case weight_type::q4_1: return make_set<more_avx2_tiles<weight_type::q4_1>::t>(4);
    case weight_type::q5_0: return make_set<more_avx2_tiles<weight_type::q5_0>::t>(4);
    case weight_type::q5_1: return make_set<more_avx2_tiles<weight_type::q5_1>::t>(4);
    case weight_type::iq4_nl: return make_set<more_avx2_tiles<weight_type::iq4_nl>::t>(4);
    case weight_type::mxfp4: return make_set<more_avx2_tiles<weight_type::mxfp4>::t>(4);
    case weight_type::q5_k: return make_set<more_avx2_tiles<weight_type::q5_k>::t>(4);
    case weight_type::iq4_xs: return make_set<more_avx2_tiles<weight_type::iq4_xs>::t>(4);
    case weight_type::q2_k: return make_set<more_avx2_tiles<weight_type::q2_k>::t>(4);
    case weight_type::q3_k: return make_set<more_avx2_tiles<weight_type::q3_k>::t>(4);
    default: break;
  }
#endif
  switch (t) {
    case weight_type::q4_0: return make_set<scalar_tiles<detail::dot_q4_0>::t>(4);
    case weight_type::q4_1: return make_set<scalar_tiles<detail::dot_q4_1>::t>(4);
    case weight_type::q5_0: return make_set<scalar_tiles<detail::dot_q5_0>::t>(4);
    case weight_type::q5_1: return make_set<scalar_tiles<detail::dot_q5_1>::t>(4);
    case weight_type::iq4_nl: return make_set<scalar_tiles<detail::dot_iq4_nl>::t>(4);
    case weight_type::mxfp4: return make_set<scalar_tiles<detail::dot_mxfp4>::t>(4);
    case weight_type::q2_k: return make_set<scalar_tiles<detail::dot_q2_k>::t>(4);
    case weight_type::q3_k: return make_set<scalar_tiles<detail::dot_q3_k>::t>(4);
    case weight_type::q5_k: return make_set<scalar_tiles<detail::dot_q5_k>::t>(4);
    case weight_type::iq4_xs: return make_set<scalar_tiles<detail::dot_iq4_xs>::t>(4);
    default: break;
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return {};
}

[[maybe_unused]] tile_set scalar_set(weight_type t) {
  switch (t) {
    case weight_type::f32: return make_set<scalar_tiles<dot_f32_scalar>::t>(4);
    case weight_type::f16: return make_set<scalar_tiles<dot_f16_scalar>::t>(4);
    case weight_type::bf16: return make_set<scalar_tiles<dot_bf16_scalar>::t>(4);
    case weight_type::q8_0: return make_set<scalar_tiles<dot_q8_0_scalar>::t>(4);
    case weight_type::q4_k: return make_set<scalar_tiles<dot_q4_k_scalar>::t>(4);
    case weight_type::q6_k: return make_set<scalar_tiles<dot_q6_k_scalar>::t>(4);
    case weight_type::q8_0_x8: case weight_type::q4_k_x8: case weight_type::q6_k_x8: break;
    default: return more_set(t);
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return {};
}

#if AGENTQ_KERNELS_AVX2
template <int R> struct q8_0_rows { static constexpr rows_fn f = rows_q8_0_avx2<R>; };
template <int R, int B> struct q8_0_mk { static constexpr mk_fn f = mk_q8_0_avx2<R, B>; };
template <int R, int B> struct q4_k_mk { static constexpr mk_fn f = mk_q4_k_avx2<R, B>; };
template <int R, int B> struct q6_k_mk { static constexpr mk_fn f = mk_q6_k_avx2<R, B>; };

#if AGENTQ_KERNELS_AVX512F
// Float micro-kernels: 2 rows per zmm register (tiles_avx512.h), 8 rows x 6 inputs (24
// accumulators). Zen 5, 110M F16 pp256, paired: 8x6 over 6x6 x1.04 (1B pp128 x1.07), over
// 6x8 x1.03; 6x6 over 6x4 x1.07; 4x6 0.94 and 2x8 0.81 of 6x4.
template <class L> struct float_mks {
  template <int R, int B> struct t { static constexpr mk_fn f = avx512::mk_float_avx512<L, R, B>; };
};
constexpr int float_mk_r = 8, float_mk_b = 6;
#else
template <class L> struct float_mks {
  template <int R, int B> struct t { static constexpr mk_fn f = mk_float_avx2<L, R, B>; };
};
constexpr int float_mk_r = 3, float_mk_b = 4;
#endif

// Adds micro-kernels MK<r, b> for r <= MR, b <= MB to a tile set.
template <template <int, int> class MK, int MR, int MB, int R = 1>
void fill_mk(tile_set& ts) {
  [&]<int... B>(std::integer_sequence<int, B...>) { ((ts.mk[R][B + 1] = MK<R, B + 1>::f), ...); }(
      std::make_integer_sequence<int, MB>{});
  if constexpr (R < MR) fill_mk<MK, MR, MB, R + 1>(ts);
}
template <template <int, int> class MK, int MR, int MB = 4>
tile_set with_mk(tile_set ts) {
  static_assert(MR <= max_mk_rows && MB <= max_mk_inputs);
  fill_mk<MK, MR, MB>(ts);
  ts.mk_r = MR;
  ts.mk_b = MB;
  return ts;
}
template <int R> struct q4_k_rows { static constexpr rows_fn f = rows_q4_k_avx2<R>; };
template <int R> struct q6_k_rows { static constexpr rows_fn f = rows_q6_k_avx2<R>; };
template <class L> struct float_rows {
  template <int R> struct t { static constexpr rows_fn f = rows_float_avx2<L, R>; };
};
#endif

tile_set fast_set(weight_type t) {
#if AGENTQ_KERNELS_AVX2
  switch (t) {
    case weight_type::f32: return with_mk<float_mks<load_f32>::t, float_mk_r, float_mk_b>(rows_set<float_rows<load_f32>::t>());
    case weight_type::f16: return with_mk<float_mks<load_f16>::t, float_mk_r, float_mk_b>(rows_set<float_rows<load_f16>::t>());
    case weight_type::bf16: return with_mk<float_mks<load_bf16>::t, float_mk_r, float_mk_b>(rows_set<float_rows<load_bf16>::t>());
    case weight_type::q8_0: return with_mk<q8_0_mk, 2>(rows_set<q8_0_rows>());
    // NOTE: Q4_K as 1 row x 8 inputs: nearly every instruction is a vector op (unpacking the
    // row's quants and scales, the per-pair float work), so the kernel is bound by the 4 vector
    // pipes and the best shape is the one with the fewest ops per MAC; 1x8 beat 2x4 (which
    // shares the input loads, but loads are not the limit), 1x4, 2x6 and 3x4 in a
    // kernel-only timing on this Zen 3 host, 1.1-1.2x over 2x4.
    case weight_type::q4_k: return with_mk<q4_k_mk, 1, 8>(rows_set<q4_k_rows>());
    // Q6_K (the rest of a Q4_K_M file) likewise as 1 row x 6 inputs: 1.15-1.2x over the 1x4
    // tile in prefill (2048x2048, 1 thread); 8 inputs spill.
    case weight_type::q6_k: return with_mk<q6_k_mk, 1, 6>(rows_set<q6_k_rows>());
    case weight_type::q8_0_x8: case weight_type::q4_k_x8: case weight_type::q6_k_x8: break;
    default: return more_set(t);
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return {};
#else
  return scalar_set(t);
#endif
}

// Bytes of one prepared activation vector of n_cols for weight type t.
size_t activation_row_bytes(weight_type t, int64_t n_cols) {
  // q4_0_x16: the Q8_0 blocks and then 8 * each block's sum of quants (int32; add_q8_0_sums).
  if (t == weight_type::q4_0_x16) return static_cast<size_t>(n_cols / qk8_0) * (sizeof(block_q8_0x) + sizeof(int32_t));
  switch (detail::act_format_of(file_type(t))) {  // a repacked layout takes its file type's activations
    case detail::act_format::q8_0: return static_cast<size_t>(n_cols / qk8_0) * sizeof(block_q8_0x);
    case detail::act_format::q8_k: return static_cast<size_t>(n_cols / qk_k) * sizeof(block_q8_k);
    default: return static_cast<size_t>(n_cols) * sizeof(float);
  }
}

// A micro-kernel's kr rows x kb inputs (o[i * kb + j]) into y at rows r.., inputs b...
inline void store_tile(const float* o, int kr, int kb, float* y, int64_t n_rows, int64_t r, int64_t b) {
  for (int i = 0; i < kr; ++i)
    for (int j = 0; j < kb; ++j) y[(b + j) * n_rows + r + i] = o[i * kb + j];
}

// NOTE: the blocking below only decides which (b, r) pairs run together; each
// pair's value comes from the same tile code path whatever the tile width.
// Three levels: an L2 block of inputs (weights stream from memory once per block),
// a chunk of rows that stays in L2, and an L1 block of inputs reused by every row
// of the chunk.
void run_tiles(const tile_set& ts, const uint8_t* w, size_t row_stride, int64_t n_cols, const uint8_t* qx,
               size_t x_stride, int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  const int64_t mb = ts.mk_r > 0 ? ts.mk_b : ts.max_b;  // inputs per call
  auto inputs_within = [&](size_t bytes) {
    const int64_t n = static_cast<int64_t>(bytes / std::max<size_t>(x_stride, 1)) / mb * mb;
    return std::max(mb, n);
  };
  const int64_t n_l2 = inputs_within(256u << 10);
  const int64_t n_l1 = inputs_within(20u << 10);
  const int64_t mr = ts.mk_r > 0 ? ts.mk_r : 1;
  // NOTE: a whole number of micro-kernel row groups per chunk (63 rows, not 64, for 3-row
  // kernels), so only a range's last group runs in a narrower kernel.
  const int64_t n_chunk =
      n_x <= mb ? row_end - row_begin
                : std::max<int64_t>(mr, std::clamp<int64_t>(static_cast<int64_t>((128u << 10) / std::max<size_t>(row_stride, 1)), 1, 64) / mr * mr);
  if (n_x == 1 && ts.rows[1]) {
    // Decode: the whole row range against the one input, max_rows rows per call.
    for (int64_t r = row_begin; r < row_end;) {
      const int k = static_cast<int>(std::min<int64_t>(max_rows, row_end - r));
      ts.rows[k](w + static_cast<size_t>(r) * row_stride, row_stride, qx, n_cols, y + r);
      r += k;
    }
    return;
  }
  // One blocking for both kernel kinds: micro-kernels take mk_r rows x mk_b inputs per
  // call, tiles one row x up to max_b inputs (then kr == 1 and o[j] is input j's value).
  const uint8_t* xs[std::max(max_tile, max_mk_inputs)];
  float o[max_mk_rows * max_mk_inputs];
  for (int64_t b0 = 0; b0 < n_x; b0 += n_l2) {
    const int64_t b0_end = std::min(n_x, b0 + n_l2);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += n_chunk) {
      const int64_t r0_end = std::min(row_end, r0 + n_chunk);
      for (int64_t b1 = b0; b1 < b0_end; b1 += n_l1) {
        const int64_t b1_end = std::min(b0_end, b1 + n_l1);
        for (int64_t r = r0; r < r0_end;) {
          const int kr = static_cast<int>(std::min<int64_t>(mr, r0_end - r));
          const uint8_t* wr = w + static_cast<size_t>(r) * row_stride;
          for (int64_t b = b1; b < b1_end;) {
            const int kb = static_cast<int>(std::min<int64_t>(mb, b1_end - b));
            for (int i = 0; i < kb; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
            if (ts.mk_r > 0) ts.mk[kr][kb](wr, row_stride, xs, n_cols, o);
            else ts.fn[kb](wr, xs, n_cols, o);
            store_tile(o, kr, kb, y, n_rows, r, b);
            b += kb;
          }
          r += kr;
        }
      }
    }
  }
}

#if AGENTQ_KERNELS_AVX512F
// Float prefill on AVX-512 builds: a chunk of rows is converted to F32 once
// (pack_float_pairs) and every input passes over it, 8 rows x 6 inputs per kernel call; the
// same operations per (row, input) as run_tiles' kernels, so the same bits.
using packed_fn = void (*)(const float*, int64_t, const uint8_t*, size_t, const uint8_t* const*, int64_t, float*);
template <int MR, int MB>
using packed_table = std::array<std::array<packed_fn, MB + 1>, MR + 1>;
// m[r][b] = mk_float_packed<L, r, b> for 1 <= r <= MR, 1 <= b <= MB.
template <class L, int MR, int MB, int R = 1>
void fill_packed(packed_table<MR, MB>& m) {
  [&]<int... B>(std::integer_sequence<int, B...>) { ((m[R][B + 1] = avx512::mk_float_packed<L, R, B + 1>), ...); }(
      std::make_integer_sequence<int, MB>{});
  if constexpr (R < MR) fill_packed<L, MR, MB, R + 1>(m);
}

template <class L>
void run_float_packed(const uint8_t* w, size_t row_stride, int64_t n_cols, const uint8_t* qx, size_t x_stride,
                      int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  constexpr int R = 8, B = 6;
  static const auto table = [] {
    packed_table<R, B> m{};
    fill_packed<L, R, B>(m);
    return m;
  }();
  const int64_t n8 = n_cols / 8 * 8;
  // Rows per chunk: ~192 KiB of packed F32 (stays in L2 while the inputs stream past).
  // NOTE: 384-640 KiB read faster in a 1-thread kernel timing at 5632 columns (x1.19-1.23)
  // but not in the engine (1B F16 pp256 at 2 threads x0.99, 110M x1.00), so the smaller.
  const int64_t chunk =
      std::clamp<int64_t>(static_cast<int64_t>((192u << 10) / (static_cast<size_t>(std::max<int64_t>(n8, 8)) * 4)), R, 64) / R * R;
  thread_local std::vector<float> pk;
  if (pk.size() < static_cast<size_t>(chunk * n8)) pk.resize(static_cast<size_t>(chunk * n8));
  const int64_t n_l1 = std::max<int64_t>(B, static_cast<int64_t>((20u << 10) / std::max<size_t>(x_stride, 1)) / B * B);
  const uint8_t* xs[B];
  float o[R * B];
  for (int64_t r0 = row_begin; r0 < row_end; r0 += chunk) {
    const int64_t r0_end = std::min(row_end, r0 + chunk);
    avx512::pack_float_pairs<L>(w + static_cast<size_t>(r0) * row_stride, row_stride, r0_end - r0, n8, pk.data());
    for (int64_t b1 = 0; b1 < n_x; b1 += n_l1) {
      const int64_t b1_end = std::min(n_x, b1 + n_l1);
      for (int64_t r = r0; r < r0_end; r += R) {
        const int kr = static_cast<int>(std::min<int64_t>(R, r0_end - r));
        for (int64_t b = b1; b < b1_end;) {
          const int kb = static_cast<int>(std::min<int64_t>(B, b1_end - b));
          for (int i = 0; i < kb; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
          table[kr][kb](pk.data() + static_cast<size_t>(r - r0) * static_cast<size_t>(n8), n8,
                        w + static_cast<size_t>(r) * row_stride, row_stride, xs, n_cols, o);
          store_tile(o, kr, kb, y, n_rows, r, b);
          b += kb;
        }
      }
    }
  }
}
#endif

#if AGENTQ_KERNELS_AVX2
// Float rows of at most this many columns take rows8_float_avx2 (AVX-512 builds:
// rows8_float_avx512, the same bits) when batched (2+ inputs).
// NOTE: AVX-512 builds too since session 28 (Zen 5: stories260K's prefill took the packed 8 x 6
// tiles, whose packing, hsums and scattered stores cost as much as their FMAs at 64 columns).
constexpr int64_t k_short_float_cols = 256;
template <class L>
inline void rows8_float(const uint8_t* w, size_t stride, const uint8_t* xb, size_t x_stride, int64_t n_x, int64_t n,
                        float* y, int64_t y_stride, int n_valid = 8) {
#if AGENTQ_KERNELS_AVX512F
  avx512::rows8_float_avx512<L>(w, stride, xb, x_stride, n_x, n, y, y_stride, n_valid);
#else
  rows8_float_avx2<L>(w, stride, xb, x_stride, n_x, n, y, y_stride, n_valid);
#endif
}

// Short float rows, 2+ inputs: groups of 8 rows against every input (rows8_float_avx2); the
// range's last rows (fewer than 8) copied into a group padded with zero rows, of which only
// they are stored. The same bits as the decode rows kernel (each lane is its own row's).
// NOTE: the padded copy, not run_tiles: a 172-row FFN matrix (stories260K) leaves 4 rows, and
// run_tiles' 3x4 and 1x4 calls on them cost ~2% of the forward.
template <class L>
void run_float_rows8(const uint8_t* w, size_t row_stride, int64_t n_cols, const uint8_t* qx, size_t x_stride,
                     int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  int64_t r = row_begin;
  for (; r + 8 <= row_end; r += 8)
    rows8_float<L>(w + static_cast<size_t>(r) * row_stride, row_stride, qx, x_stride, n_x, n_cols, y + r, n_rows);
  if (r == row_end) return;
  const size_t row_bytes = static_cast<size_t>(n_cols) * L::size;
  alignas(64) uint8_t pad[8 * k_short_float_cols * 4];
  std::memset(pad, 0, 8 * row_bytes);
  for (int64_t i = r; i < row_end; ++i)
    std::memcpy(pad + static_cast<size_t>(i - r) * row_bytes, w + static_cast<size_t>(i) * row_stride, row_bytes);
  rows8_float<L>(pad, row_bytes, qx, x_stride, n_x, n_cols, y + r, n_rows, static_cast<int>(row_end - r));
}
#endif

bool is_x8(weight_type t) { return file_type(t) != t; }
// Rows per group of a repacked layout (16 for q4_0_x16, 8 for the _x8 ones).
int64_t group_rows(weight_type t) { return t == weight_type::q4_0_x16 ? 16 : 8; }

// Q8_0 activation blocks (bytes of them) with every quant biased by +128 (x ^ 0x80: an
// unsigned byte), for mk_q8_0_x8_pair; the scales as they were.
[[maybe_unused]] void bias_q8_0_activations(const uint8_t* qx, size_t bytes, uint8_t* out) {
  std::memcpy(out, qx, bytes);
  for (size_t o = 0; o < bytes; o += sizeof(detail::block_q8_0x)) {
    auto* blk = reinterpret_cast<detail::block_q8_0x*>(out + o);
    for (auto& q : blk->qs) q = static_cast<int8_t>(static_cast<uint8_t>(q) ^ 0x80u);
  }
}

// Per Q8_K activation block, its sub-block sums S_s (the bsums per 16 added in pairs; |S| <= 32 *
// 127, exact in int16) packed as the 4 dwords [S_2p, S_2p+1], for mk_q4_k_x8_pair's mins.
[[maybe_unused]] void q4_k_sub_sums(const uint8_t* qx, size_t x_stride, int64_t n_x, int64_t nb, int32_t* out) {
  for (int64_t b = 0; b < n_x; ++b) {
    auto x = reinterpret_cast<const detail::block_q8_k*>(qx + static_cast<size_t>(b) * x_stride);
    for (int64_t i = 0; i < nb; ++i)
      for (int p = 0; p < 4; ++p) {
        const auto s0 = static_cast<int16_t>(x[i].bsums[4 * p] + x[i].bsums[4 * p + 1]);
        const auto s1 = static_cast<int16_t>(x[i].bsums[4 * p + 2] + x[i].bsums[4 * p + 3]);
        out[(b * nb + i) * 4 + p] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(s0)) |
                                                         (static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16));
      }
  }
}

// _x8 layouts: groups of 8 rows (16 for q4_0_x16; row_stride bytes per row, so a group is
// 8 * row_stride bytes) x up to 4 inputs (q4_0_x16: 8) per kernel call; a group the row range cuts is computed whole into a
// buffer and only its rows in range are stored. Blocked like run_tiles: a chunk of groups
// stays in L2 while blocks of inputs pass over it.
using x8_fn = void (*)(const uint8_t* group, const uint8_t* const* x, int64_t n_cols, float* out, const uint8_t* next);
void run_x8(weight_type t, const uint8_t* w, size_t row_stride, int64_t n_cols, const uint8_t* qx, size_t x_stride, int64_t n_x,
            float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
#if AGENTQ_KERNELS_AVX2
  constexpr int mb = 4, mb_max = 8;  // inputs per kernel call (mb_max: q4_0_x16)
#if AGENTQ_KERNELS_AVX512VNNI
  using avx512::mk_q4_k_x8, avx512::mk_q6_k_x8, avx512::mk_q8_0_x8;
  static constexpr x8_fn q8_0[mb + 1] = {nullptr, mk_q8_0_x8<1>, mk_q8_0_x8<2>, mk_q8_0_x8<3>, mk_q8_0_x8<4>};
  static constexpr x8_fn q4_k[mb + 1] = {nullptr, mk_q4_k_x8<1>, mk_q4_k_x8<2>, mk_q4_k_x8<3>, mk_q4_k_x8<4>};
  static constexpr x8_fn q6_k[mb + 1] = {nullptr, mk_q6_k_x8<1>, mk_q6_k_x8<2>, mk_q6_k_x8<3>, mk_q6_k_x8<4>};
  using avx512::mk_q4_0_x16, avx512::mk_q5_k_x8, avx512::mk_iq4_xs_x8;
  // NOTE: Q4_0 takes up to 8 inputs a call: its per-block unpacking is a larger share of the work
  // than in the 256-element formats, and 8 accumulators still fit the 32 registers.
  static constexpr x8_fn q4_0[mb_max + 1] = {nullptr,          mk_q4_0_x16<1>, mk_q4_0_x16<2>, mk_q4_0_x16<3>, mk_q4_0_x16<4>,
                                             mk_q4_0_x16<5>, mk_q4_0_x16<6>, mk_q4_0_x16<7>, mk_q4_0_x16<8>};
  static constexpr x8_fn q5_k[mb + 1] = {nullptr, mk_q5_k_x8<1>, mk_q5_k_x8<2>, mk_q5_k_x8<3>, mk_q5_k_x8<4>};
  static constexpr x8_fn iq4_xs[mb + 1] = {nullptr, mk_iq4_xs_x8<1>, mk_iq4_xs_x8<2>, mk_iq4_xs_x8<3>, mk_iq4_xs_x8<4>};
  using avx512::mk_q3_k_x8;
  static constexpr x8_fn q3_k[mb + 1] = {nullptr, mk_q3_k_x8<1>, mk_q3_k_x8<2>, mk_q3_k_x8<3>, mk_q3_k_x8<4>};
  constexpr int mb_q4_0 = mb_max;
#else
  static constexpr x8_fn q8_0[mb + 1] = {nullptr, mk_q8_0_x8_avx2<1>, mk_q8_0_x8_avx2<2>, mk_q8_0_x8_avx2<3>,
                                         mk_q8_0_x8_avx2<4>};
  static constexpr x8_fn q4_k[mb + 1] = {nullptr, mk_q4_k_x8_avx2<1>, mk_q4_k_x8_avx2<2>, mk_q4_k_x8_avx2<3>,
                                         mk_q4_k_x8_avx2<4>};
  static constexpr x8_fn q6_k[mb + 1] = {nullptr, mk_q6_k_x8_avx2<1>, mk_q6_k_x8_avx2<2>, mk_q6_k_x8_avx2<3>,
                                         mk_q6_k_x8_avx2<4>};
  // NOTE: Q4_0 at up to 4 inputs here: its 16-row AVX2 kernel holds 8 nibble vectors and 2 accumulators
  // per input in 16 registers.
  static constexpr x8_fn q4_0[mb + 1] = {nullptr, mk_q4_0_x16_avx2<1>, mk_q4_0_x16_avx2<2>, mk_q4_0_x16_avx2<3>,
                                         mk_q4_0_x16_avx2<4>};
  static constexpr x8_fn q5_k[mb + 1] = {nullptr, mk_q5_k_x8_avx2<1>, mk_q5_k_x8_avx2<2>, mk_q5_k_x8_avx2<3>,
                                         mk_q5_k_x8_avx2<4>};
  static constexpr x8_fn iq4_xs[mb + 1] = {nullptr, mk_iq4_xs_x8_avx2<1>, mk_iq4_xs_x8_avx2<2>, mk_iq4_xs_x8_avx2<3>,
                                           mk_iq4_xs_x8_avx2<4>};
  static constexpr x8_fn q3_k[mb + 1] = {nullptr, mk_q3_k_x8_avx2<1>, mk_q3_k_x8_avx2<2>, mk_q3_k_x8_avx2<3>,
                                         mk_q3_k_x8_avx2<4>};
  constexpr int mb_q4_0 = mb;
#endif
  const x8_fn* fns = nullptr;
  int mb_t = mb;
  switch (t) {
    case weight_type::q8_0_x8: fns = q8_0; break;
    case weight_type::q4_k_x8: fns = q4_k; break;
    case weight_type::q6_k_x8: fns = q6_k; break;
    case weight_type::q4_0_x16: fns = q4_0, mb_t = mb_q4_0; break;
    case weight_type::q5_k_x8: fns = q5_k; break;
    case weight_type::iq4_xs_x8: fns = iq4_xs; break;
    case weight_type::q3_k_x8: fns = q3_k; break;
    default: break;
  }
  AGENTQ_KCHECK(fns != nullptr);
  const int64_t gr = group_rows(t);
  const size_t group_bytes = static_cast<size_t>(gr) * row_stride;
  const int64_t g_begin = row_begin / gr, g_end = (row_end + gr - 1) / gr;
  float o[16 * mb_max];
  auto store = [&](int64_t g, int64_t b, int kb) {
    const int64_t lo = std::max(row_begin, gr * g), hi = std::min(row_end, gr * g + gr);
    for (int j = 0; j < kb; ++j)
      for (int64_t r = lo; r < hi; ++r) y[(b + j) * n_rows + r] = o[gr * j + (r - gr * g)];
  };
  // A pair kernel's output o2 ([input][2 groups][8 rows]) into y: whole groups inside the row
  // range as one 16-float copy per input, the edges through store.
  auto store_pair = [&](const float* o2, int64_t g, int64_t b, int kb) {
    if (gr == 8 && 8 * g >= row_begin && 8 * g + 16 <= row_end) {
      for (int j = 0; j < kb; ++j) std::memcpy(y + (b + j) * n_rows + 8 * g, o2 + 16 * j, 16 * sizeof(float));
      return;
    }
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < kb; ++j)
        for (int r = 0; r < 8; ++r) o[8 * j + r] = o2[16 * j + 8 * h + r];
      store(g + h, b, kb);
    }
  };
  // NOTE: the stream is read linearly; the kernel prefetches k_ahead bytes past its position
  // (Zen 3: 1.5-3 KiB measured best for Q8_0 at 4096 columns, +15-20% over one group ahead,
  // 35 KiB there; Q4_K within noise). A Zen 5 core (k_avx512_core) keeps more misses in
  // flight: 6-8 KiB best, 2 threads 70-74 -> 80-83 GB/s at 768-2048 columns (CPU clock;
  // 12-16 KiB fell back).
  constexpr size_t k_ahead = k_avx512_core ? 6144 : 2048;
  if (n_x == 1) {
    for (int64_t g = g_begin; g < g_end; ++g) {
      const uint8_t* wg = w + static_cast<size_t>(g) * group_bytes;
      fns[1](wg, &qx, n_cols, o, g + 1 < g_end ? wg + k_ahead : nullptr);
      store(g, 0, 1);
    }
    return;
  }
  // NOTE: few inputs (a verify pass of up to 9 tokens, a small decode batch) form one block
  // whatever their size, so every group is read from memory once and consumed whole, and is
  // prefetched ahead as decode does. Without it a second kernel call on the same group (5..8
  // inputs) broke the hardware prefetcher's stream: 5 inputs cost 2.1 matvecs against 1.2 for
  // 4 (Zen 5, 2048 x 768 Q8_0; 1.3-1.5 with the prefetch). More inputs reuse a chunk from L2
  // over several input blocks; a non-temporal prefetch there would evict what they reuse.
  const bool few = n_x <= 3 * mb_t;
  // NOTE: the pair kernels (Q8_0, Q4_K) keep the one-block, prefetched path up to k_few_pair
  // inputs (a verify pass of up to 24 tokens), in calls of at most 8 inputs of about equal size.
  // Zen 5, 2048 x 768 Q4_K, one thread: 13-16 inputs cost 8.1-8.8 matvecs on the blocked path
  // (the chunk is not prefetched and 16 inputs reuse it too little to repay the misses), 12 cost 4.5.
  constexpr int64_t k_few_pair = 24;
  const bool few_pair = n_x <= k_few_pair;
  const int kb_pair = static_cast<int>((n_x + (n_x + 7) / 8 - 1) / ((n_x + 7) / 8));  // ceil(n_x / ceil(n_x / 8))
  const int64_t n_l1 =
      few ? n_x : std::max<int64_t>(mb_t, static_cast<int64_t>((20u << 10) / std::max<size_t>(x_stride, 1)) / mb_t * mb_t);
  const uint8_t* xs[12];  // up to 12 inputs a call (mk_q4_k_x8_pair<12>)
#if AGENTQ_KERNELS_AVX512VNNI
  if (t == weight_type::q8_0_x8 && few_pair && n_x >= 4) {
    // Q8_0, few inputs: two groups per call, up to 8 inputs (mk_q8_0_x8_pair), against a copy of
    // the inputs biased to unsigned; an odd last group takes the kernels above.
    // NOTE: Zen 5, 2048 x 768, one thread, in matvecs: 8 inputs 1.9 -> 1.2 (5: 1.4 -> 1.1); 2
    // and 3 inputs, still memory-bound, read 1.0-1.1 before and 1.2 here, so they keep mk_q8_0_x8.
    using pair_fn = void (*)(const uint8_t*, const uint8_t*, const uint8_t* const*, int64_t, float*, const uint8_t*,
                             const uint8_t*);
    using avx512::mk_q8_0_x8_pair;
    static constexpr pair_fn pair[9] = {nullptr,            mk_q8_0_x8_pair<1>, mk_q8_0_x8_pair<2>,
                                        mk_q8_0_x8_pair<3>, mk_q8_0_x8_pair<4>, mk_q8_0_x8_pair<5>,
                                        mk_q8_0_x8_pair<6>, mk_q8_0_x8_pair<7>, mk_q8_0_x8_pair<8>};
    thread_local std::vector<uint8_t> biased;
    biased.resize(static_cast<size_t>(n_x) * x_stride);
    bias_q8_0_activations(qx, static_cast<size_t>(n_x) * x_stride, biased.data());
    const int kb_max = kb_pair;
    float o2[16 * 8];
    int64_t g = g_begin;
    for (; g + 1 < g_end; g += 2) {
      const uint8_t* wg = w + static_cast<size_t>(g) * group_bytes;
      const uint8_t* n0 = g + 2 < g_end ? wg + 2 * group_bytes : nullptr;
      const uint8_t* n1 = g + 3 < g_end ? wg + 3 * group_bytes : n0;
      for (int64_t b = 0; b < n_x;) {
        const int kb = static_cast<int>(std::min<int64_t>(kb_max, n_x - b));
        for (int i = 0; i < kb; ++i) xs[i] = biased.data() + static_cast<size_t>(b + i) * x_stride;
        pair[kb](wg, wg + group_bytes, xs, n_cols, o2, b == 0 ? n0 : nullptr, b == 0 ? n1 : nullptr);
        store_pair(o2, g, b, kb);
        b += kb;
      }
    }
    for (; g < g_end; ++g)
      for (int64_t b = 0; b < n_x;) {
        const int kb = static_cast<int>(std::min<int64_t>(mb_t, n_x - b));
        for (int i = 0; i < kb; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
        fns[kb](w + static_cast<size_t>(g) * group_bytes, xs, n_cols, o, nullptr);
        store(g, b, kb);
        b += kb;
      }
    return;
  }
  if (t == weight_type::q4_k_x8 && (!few_pair || n_x >= 5)) {
    // Q4_K: two groups per call (mk_q4_k_x8_pair), up to 8 inputs a call, the inputs' sub-block
    // sums computed once here; an odd last group takes the kernels above. Few inputs (a verify
    // pass) in one block, prefetched ahead as above; many (prefill) blocked as below.
    // NOTE: Zen 5, one thread, paired in one process (load 7-9, so +-10%), in mk_q4_k_x8's time:
    // 2048 x 768, 6-8 inputs 0.82-0.88, 5 and 9 0.95, 64-128 inputs 0.75-0.80 (2048 x 2048: 0.75,
    // 16 inputs 0.84-0.94); 2-4 inputs read 1.04-1.30 (memory-bound there, the pair's two streams
    // prefetch worse), so they keep mk_q4_k_x8. The input block size (8..64) did not matter.
    using pair_fn = void (*)(const uint8_t*, const uint8_t*, const uint8_t* const*, const int32_t* const*, int64_t,
                             float*, const uint8_t*, const uint8_t*);
    using avx512::mk_q4_k_x8_pair;
    // NOTE: 12 inputs a call where there are 12: GCC does not fully unroll mk_q4_k_x8_pair<12>
    // and keeps its input pointers and accumulators in registers, while <5>..<11> unroll into
    // spills (Zen 5, one group pair in L1, thread CPU clock, per input, in <8>'s time: <12>
    // 0.75-0.78, <13>..<16> 0.78-0.95, <17>..<24> 1.7-2.2, <5>..<11> 0.86-1.22 with no trend).
    // 2048 x 768, one thread: 17 inputs (a 16-token verify) 140 -> 127-132 us, 12: 100-116 -> 88-90.
    static constexpr pair_fn pair[13] = {nullptr,             mk_q4_k_x8_pair<1>,  mk_q4_k_x8_pair<2>,
                                         mk_q4_k_x8_pair<3>,  mk_q4_k_x8_pair<4>,  mk_q4_k_x8_pair<5>,
                                         mk_q4_k_x8_pair<6>,  mk_q4_k_x8_pair<7>,  mk_q4_k_x8_pair<8>,
                                         nullptr,             nullptr,             nullptr,
                                         mk_q4_k_x8_pair<12>};
    // Inputs for the next call of a block with `left` inputs to go: 12 while 12 are left, then
    // what remains in one call (up to 8) or two of about equal size (9..11).
    auto next_kb = [](int64_t left) {
      if (left >= 12) return 12;
      if (left <= 8) return static_cast<int>(left);
      return static_cast<int>((left + 1) / 2);
    };
    const int64_t nb = n_cols / qk_k;
    thread_local std::vector<int32_t> sums;
    sums.resize(static_cast<size_t>(n_x * nb * 4));
    q4_k_sub_sums(qx, x_stride, n_x, nb, sums.data());
    const int32_t* sp[12];
    float o2[16 * 12];
    const int64_t n_blk = few_pair ? n_x : std::max<int64_t>(12, n_l1 / 12 * 12);
    const int64_t n_chunk2 =
        few_pair ? g_end - g_begin
            : std::max<int64_t>(2, static_cast<int64_t>((128u << 10) / std::max<size_t>(group_bytes, 1)) / 2 * 2);
    for (int64_t c0 = g_begin; c0 < g_end; c0 += n_chunk2) {
      const int64_t c_end = std::min(g_end, c0 + n_chunk2);
      for (int64_t b1 = 0; b1 < n_x; b1 += n_blk) {
        const int64_t b1_end = std::min(n_x, b1 + n_blk);
        int64_t g = c0;
        for (; g + 1 < c_end; g += 2) {
          const uint8_t* wg = w + static_cast<size_t>(g) * group_bytes;
          const uint8_t* n0 = few_pair && g + 2 < g_end ? wg + 2 * group_bytes : nullptr;
          const uint8_t* n1 = few_pair && g + 3 < g_end ? wg + 3 * group_bytes : n0;
          for (int64_t b = b1; b < b1_end;) {
            const int kb = next_kb(b1_end - b);
            for (int i = 0; i < kb; ++i) {
              xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
              sp[i] = sums.data() + (b + i) * nb * 4;
            }
            pair[kb](wg, wg + group_bytes, xs, sp, n_cols, o2, b == b1 ? n0 : nullptr, b == b1 ? n1 : nullptr);
            store_pair(o2, g, b, kb);
            b += kb;
          }
        }
        for (; g < c_end; ++g)
          for (int64_t b = b1; b < b1_end;) {
            const int kb = static_cast<int>(std::min<int64_t>(mb_t, b1_end - b));
            for (int i = 0; i < kb; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
            fns[kb](w + static_cast<size_t>(g) * group_bytes, xs, n_cols, o, nullptr);
            store(g, b, kb);
            b += kb;
          }
      }
    }
    return;
  }
#endif
  const int64_t n_chunk = std::max<int64_t>(1, static_cast<int64_t>((128u << 10) / std::max<size_t>(group_bytes, 1)));
  for (int64_t g0 = g_begin; g0 < g_end; g0 += n_chunk) {
    const int64_t g0_end = std::min(g_end, g0 + n_chunk);
    for (int64_t b1 = 0; b1 < n_x; b1 += n_l1) {
      const int64_t b1_end = std::min(n_x, b1 + n_l1);
      for (int64_t g = g0; g < g0_end; ++g) {
        const uint8_t* wg = w + static_cast<size_t>(g) * group_bytes;
        for (int64_t b = b1; b < b1_end;) {
          const int kb = static_cast<int>(std::min<int64_t>(mb_t, b1_end - b));
          for (int i = 0; i < kb; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
          fns[kb](wg, xs, n_cols, o, few && b == b1 && g + 1 < g_end ? wg + k_ahead : nullptr);
          store(g, b, kb);
          b += kb;
        }
      }
    }
  }
#else
  (void)t, (void)w, (void)row_stride, (void)n_cols, (void)qx, (void)x_stride, (void)n_x, (void)y, (void)row_begin,
      (void)row_end, (void)n_rows;
  AGENTQ_KCHECK(!"the _x8 layouts need the AVX2 kernels (preferred_layout never picks them without)");
#endif
}

void check_args(weight_type t, int64_t n_cols, int64_t n_x, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  AGENTQ_KCHECK(block_elems(t) > 0);
  AGENTQ_KCHECK(n_cols > 0 && n_cols % block_elems(t) == 0);
  AGENTQ_KCHECK(n_x >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= n_rows);
  AGENTQ_KCHECK(!is_x8(t) || n_rows % group_rows(t) == 0);  // whole groups of 8 (16) rows
}

std::vector<uint8_t>& scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

size_t activation_bytes(weight_type t, int64_t n_cols, int64_t n_x) {
  return activation_row_bytes(t, n_cols) * static_cast<size_t>(n_x);
}

bool activations_are_floats(weight_type t) {
  return t != weight_type::q4_0_x16 && detail::act_format_of(file_type(t)) == detail::act_format::f32;
}

void quantize_activations(weight_type t, const float* x, int64_t n_cols, int64_t n_x, void* qx) {
  AGENTQ_KCHECK(block_elems(t) > 0 && n_cols % block_elems(t) == 0);
  const size_t stride = activation_row_bytes(t, n_cols);
  auto dst = static_cast<uint8_t*>(qx);
  for (int64_t b = 0; b < n_x; ++b) {
    const float* xb = x + b * n_cols;
    uint8_t* d = dst + static_cast<size_t>(b) * stride;
    switch (detail::act_format_of(file_type(t))) {
      case detail::act_format::q8_0:
        detail::quantize_act_q8_0(xb, reinterpret_cast<block_q8_0x*>(d), n_cols);
        if (t == weight_type::q4_0_x16)
          detail::add_q8_0_sums(reinterpret_cast<const block_q8_0x*>(d), n_cols / qk8_0,
                                reinterpret_cast<int32_t*>(d + static_cast<size_t>(n_cols / qk8_0) * sizeof(block_q8_0x)));
        break;
      case detail::act_format::q8_k: detail::quantize_act_q8_k(xb, reinterpret_cast<block_q8_k*>(d), n_cols); break;
      default: std::memcpy(d, xb, stride); break;
    }
  }
}

void matmul_prequantized(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const void* qx,
                         int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  if (is_x8(t)) {
    run_x8(t, static_cast<const uint8_t*>(w), row_stride_bytes, n_cols, static_cast<const uint8_t*>(qx),
           activation_row_bytes(t, n_cols), n_x, y, row_begin, row_end, n_rows);
    return;
  }
#if AGENTQ_KERNELS_AVX2
  // NOTE: AVX-512 builds take it for F32 only: F16/BF16 rows there convert each weight vector per
  // input pair, where the packed tiles convert a chunk once (Zen 5, 256 columns, 24 inputs, one
  // thread: F32 259-379k -> 423-433k tok/s, F16 398-435k -> 394-404k, BF16 402-429k -> 341-398k).
  if (n_x >= 2 && n_cols <= k_short_float_cols &&
      (t == weight_type::f32 || ((t == weight_type::f16 || t == weight_type::bf16) && !k_avx512_core))) {
    const auto run = t == weight_type::f32 ? run_float_rows8<load_f32>
                     : t == weight_type::f16 ? run_float_rows8<load_f16>
                                             : run_float_rows8<load_bf16>;
    run(static_cast<const uint8_t*>(w), row_stride_bytes, n_cols, static_cast<const uint8_t*>(qx),
        activation_row_bytes(t, n_cols), n_x, y, row_begin, row_end, n_rows);
    return;
  }
#endif
#if AGENTQ_KERNELS_AVX512F
  // NOTE: from 8 inputs on, where a packed chunk serves enough inputs to repay its conversion;
  // fewer (batched decode) stream the rows through run_tiles' kernels. Either way, same bits.
  if (n_x >= 8 && (t == weight_type::f32 || t == weight_type::f16 || t == weight_type::bf16)) {
    const auto run = t == weight_type::f32 ? run_float_packed<load_f32>
                     : t == weight_type::f16 ? run_float_packed<load_f16>
                                             : run_float_packed<load_bf16>;
    run(static_cast<const uint8_t*>(w), row_stride_bytes, n_cols, static_cast<const uint8_t*>(qx),
        activation_row_bytes(t, n_cols), n_x, y, row_begin, row_end, n_rows);
    return;
  }
#endif
  run_tiles(fast_set(t), static_cast<const uint8_t*>(w), row_stride_bytes, n_cols, static_cast<const uint8_t*>(qx),
            activation_row_bytes(t, n_cols), n_x, y, row_begin, row_end, n_rows);
}

void matmul(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const float* x, int64_t n_x,
            float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  const void* qx = x;
  if (detail::act_format_of(file_type(t)) != detail::act_format::f32) {
    auto& buf = scratch();
    buf.resize(activation_bytes(t, n_cols, n_x));
    quantize_activations(t, x, n_cols, n_x, buf.data());
    qx = buf.data();
  }
  matmul_prequantized(t, w, row_stride_bytes, n_cols, qx, n_x, y, row_begin, row_end, n_rows);
}

void matmul_reference(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const float* x,
                      int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  std::vector<uint8_t> qx(activation_bytes(t, n_cols, n_x));
  quantize_activations(t, x, n_cols, n_x, qx.data());
  const size_t x_stride = activation_row_bytes(t, n_cols);
  if (is_x8(t)) {
    const int64_t gr = group_rows(t);
    const auto dot8 = t == weight_type::q8_0_x8     ? detail::dot_q8_0_x8_scalar
                      : t == weight_type::q4_k_x8   ? detail::dot_q4_k_x8_scalar
                      : t == weight_type::q6_k_x8   ? detail::dot_q6_k_x8_scalar
                      : t == weight_type::q4_0_x16   ? detail::dot_q4_0_x16_scalar
                      : t == weight_type::q5_k_x8   ? detail::dot_q5_k_x8_scalar
                      : t == weight_type::q3_k_x8   ? detail::dot_q3_k_x8_scalar
                                                    : detail::dot_iq4_xs_x8_scalar;
    for (int64_t b = 0; b < n_x; ++b)
      for (int64_t r = row_begin; r < row_end; ++r)
        y[b * n_rows + r] = dot8(
            static_cast<const uint8_t*>(w) + static_cast<size_t>(r / gr) * gr * row_stride_bytes, static_cast<int>(r % gr),
            qx.data() + static_cast<size_t>(b) * x_stride, n_cols);
    return;
  }
  const dot_fn dot = scalar_dot(t);
  for (int64_t b = 0; b < n_x; ++b)
    for (int64_t r = row_begin; r < row_end; ++r)
      y[b * n_rows + r] = dot(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride_bytes,
                              qx.data() + static_cast<size_t>(b) * x_stride, n_cols);
}

}  // namespace agentq::kernels
