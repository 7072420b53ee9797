// Weight layouts for the CPU kernels: Q8_0, Q4_K and Q6_K repacked into 8-row interleaved
// blocks (block_q8_0x8, block_q4_kx8, block_q6_kx8) at load, the scalar dot products that define
// their math, and the layout choice for every type (Q4_0, Q5_K, IQ4_XS, Q3_K: repack_more.cpp).
#include "cpu/repack.h"

#include <cmath>
#include <cstring>

#include "cpu/check.h"

namespace agentq::kernels {

namespace {

// Element e (< 256) of a Q4_K super-block: per 64 elements, the low nibbles hold the
// first 32 and the high nibbles the next 32.
uint8_t q4_k_quant(const block_q4_k& b, int e) {
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  return (e % 64) < 32 ? byte & 0xF : byte >> 4;
}

void repack_q8_0_x8(const block_q8_0* src, int64_t n_rows, int64_t nb, block_q8_0x8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q8_0x8& o = dst[g * nb + i];
      for (int r = 0; r < 8; ++r) {
        const block_q8_0& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        for (int k = 0; k < 8; ++k) std::memcpy(o.qs + k * 32 + r * 4, b.qs + 4 * k, 4);
      }
    }
}

void repack_q4_k_x8(const block_q4_k* src, int64_t n_rows, int64_t nb, block_q4_kx8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q4_kx8& o = dst[g * nb + i];
      for (int r = 0; r < 8; ++r) {
        const block_q4_k& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        o.dmin[r] = b.dmin;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          detail::get_scale_min_k4(s, b.scales, &sc, &m);
          o.scales[detail::x8_scale_at(s, r)] = sc;
          o.mins[detail::x8_scale_at(s, r)] = m;
        }
        detail::pack_nibbles(o.qs, 8, r, qk_k, [&](int e) { return q4_k_quant(b, e); });
      }
    }
}

// Element e (< 256) of a Q6_K super-block as the unsigned 6-bit quant (value + 32).
uint8_t q6_k_quant(const block_q6_k& b, int e) {
  const int half = e / 128, l = e % 128, quarter = l / 32, i = l % 32;
  const uint8_t lo = b.ql[64 * half + i + 32 * (quarter % 2)];
  const uint8_t low4 = quarter < 2 ? lo & 0xF : lo >> 4;
  const uint8_t high2 = (b.qh[32 * half + i] >> (2 * quarter)) & 3;
  return uint8_t(low4 | (high2 << 4));
}

void repack_q6_k_x8(const block_q6_k* src, int64_t n_rows, int64_t nb, block_q6_kx8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q6_kx8& o = dst[g * nb + i];
      for (int r = 0; r < 8; ++r) {
        const block_q6_k& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        for (int s = 0; s < 16; ++s) o.scales[detail::x8_scale_at(s, r)] = b.scales[s];
        detail::pack_nibbles(o.ql, 8, r, qk_k, [&](int e) { return q6_k_quant(b, e) & 0xF; });
        for (int c = 0; c < 16; ++c)
          for (int j = 0; j < 4; ++j) {
            uint8_t h = 0;
            for (int f = 0; f < 4; ++f) h = uint8_t(h | ((q6_k_quant(b, 16 * c + 4 * f + j) >> 4) << (2 * f)));
            o.qh[c * 32 + r * 4 + j] = h;
          }
      }
    }
}

}  // namespace

namespace detail {

float dot_q6_k_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q6_kx8*>(group);
  auto x = reinterpret_cast<const block_q8_k*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q6_kx8& b = w[i];
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t dot = 0;
      for (int e = 16 * s; e < 16 * s + 16; ++e) {
        const int c = e / 16, f = (e % 16) / 4;
        const int q = x8_nibble(b.ql, 8, r, e) | (((b.qh[c * 32 + r * 4 + e % 4] >> (2 * f)) & 3) << 4);
        dot += q * x[i].qs[e];
      }
      const int sc = b.scales[x8_scale_at(s, r)];
      sumi += sc * dot;
      summ += sc * x[i].bsums[s];
    }
    // NOTE: the quants are stored + 32; subtracting 32 * (scaled sums of x) is exact in int32.
    acc = std::fma(fp16_to_fp32(b.d[r]) * x[i].d, static_cast<float>(sumi - 32 * summ), acc);
  }
  return acc;
}

float dot_q8_0_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q8_0x8*>(group);
  auto x = reinterpret_cast<const block_q8_0x*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    int32_t s = 0;
    for (int e = 0; e < qk8_0; ++e) s += w[i].qs[(e / 4) * 32 + r * 4 + e % 4] * x[i].qs[e];
    acc = std::fma(fp16_to_fp32(w[i].d[r]) * x[i].d, static_cast<float>(s), acc);  // the kernel's fmadd
  }
  return acc;
}

float dot_q4_k_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q4_kx8*>(group);
  auto x = reinterpret_cast<const block_q8_k*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q4_kx8& b = w[i];
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t dot = 0;
      for (int e = 32 * s; e < 32 * s + 32; ++e) {
        dot += x8_nibble(b.qs, 8, r, e) * x[i].qs[e];
      }
      const int at = x8_scale_at(s, r);
      sumi += b.scales[at] * dot;
      summ += b.mins[at] * (x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
    }
    // NOTE: explicit fmas, as the AVX2 kernel's fmadd / fnmadd (one chain per row and input).
    acc = std::fma(fp16_to_fp32(b.d[r]) * x[i].d, static_cast<float>(sumi), acc);
    acc = std::fma(-(fp16_to_fp32(b.dmin[r]) * x[i].d), static_cast<float>(summ), acc);
  }
  return acc;
}

}  // namespace detail

weight_type preferred_layout(weight_type t, int64_t n_rows, int64_t n_cols) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  const bool groups = n_rows > 0 && n_rows % 8 == 0;
  if (t == weight_type::q8_0 && groups && n_cols % qk8_0 == 0) return weight_type::q8_0_x8;
  if (t == weight_type::q4_k && groups && n_cols % qk_k == 0) return weight_type::q4_k_x8;
  if (t == weight_type::q6_k && groups && n_cols % qk_k == 0) return weight_type::q6_k_x8;
  if (t == weight_type::q4_0 && n_rows > 0 && n_rows % 16 == 0 && n_cols % qk8_0 == 0) return weight_type::q4_0_x16;
  if (t == weight_type::q5_k && groups && n_cols % qk_k == 0) return weight_type::q5_k_x8;
  if (t == weight_type::iq4_xs && groups && n_cols % qk_k == 0) return weight_type::iq4_xs_x8;
  if (t == weight_type::q3_k && groups && n_cols % qk_k == 0) return weight_type::q3_k_x8;
#else
  (void)n_rows;
  (void)n_cols;
#endif
  return t;
}

weight_type file_type(weight_type t) {
  switch (t) {
    case weight_type::q8_0_x8: return weight_type::q8_0;
    case weight_type::q4_k_x8: return weight_type::q4_k;
    case weight_type::q6_k_x8: return weight_type::q6_k;
    case weight_type::q4_0_x16: return weight_type::q4_0;
    case weight_type::q5_k_x8: return weight_type::q5_k;
    case weight_type::iq4_xs_x8: return weight_type::iq4_xs;
    case weight_type::q3_k_x8: return weight_type::q3_k;
    default: return t;
  }
}

size_t matrix_bytes(weight_type t, int64_t n_rows, int64_t n_cols) {
  return row_bytes(t, n_cols) * static_cast<size_t>(n_rows);
}

void repack(weight_type from, const void* src, int64_t n_rows, int64_t n_cols, weight_type to, void* dst) {
  AGENTQ_KCHECK(n_rows >= 0 && block_elems(from) > 0 && n_cols % block_elems(from) == 0);
  if (from == to) {
    std::memcpy(dst, src, matrix_bytes(from, n_rows, n_cols));
    return;
  }
  AGENTQ_KCHECK(n_rows % 8 == 0);
  if (from == weight_type::q8_0 && to == weight_type::q8_0_x8) {
    repack_q8_0_x8(static_cast<const block_q8_0*>(src), n_rows, n_cols / qk8_0, static_cast<block_q8_0x8*>(dst));
    return;
  }
  if (from == weight_type::q6_k && to == weight_type::q6_k_x8) {
    repack_q6_k_x8(static_cast<const block_q6_k*>(src), n_rows, n_cols / qk_k, static_cast<block_q6_kx8*>(dst));
    return;
  }
  if (from == weight_type::q4_0 && to == weight_type::q4_0_x16) {
    AGENTQ_KCHECK(n_rows % 16 == 0);
    detail::repack_q4_0_x16(static_cast<const block_q4_0*>(src), n_rows, n_cols / qk8_0, static_cast<block_q4_0x16*>(dst));
    return;
  }
  if (from == weight_type::q5_k && to == weight_type::q5_k_x8) {
    detail::repack_q5_k_x8(static_cast<const block_q5_k*>(src), n_rows, n_cols / qk_k, static_cast<block_q5_kx8*>(dst));
    return;
  }
  if (from == weight_type::iq4_xs && to == weight_type::iq4_xs_x8) {
    detail::repack_iq4_xs_x8(static_cast<const block_iq4_xs*>(src), n_rows, n_cols / qk_k, static_cast<block_iq4_xsx8*>(dst));
    return;
  }
  if (from == weight_type::q3_k && to == weight_type::q3_k_x8) {
    detail::repack_q3_k_x8(static_cast<const block_q3_k*>(src), n_rows, n_cols / qk_k, static_cast<block_q3_kx8*>(dst));
    return;
  }
  AGENTQ_KCHECK(from == weight_type::q4_k && to == weight_type::q4_k_x8);
  repack_q4_k_x8(static_cast<const block_q4_k*>(src), n_rows, n_cols / qk_k, static_cast<block_q4_kx8*>(dst));
}

}  // namespace agentq::kernels
