// The ggml block formats beyond Q8_0/Q4_K/Q6_K: dequantizers (ggml's dequantize_row_*, bit
// for bit) and quantizers: the 32-element formats' quantize_row_*_ref, IQ4_NL/IQ4_XS as
// llama-quantize runs them (quantize_iq4_nl / quantize_iq4_xs without an importance matrix).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/check.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels::detail {

namespace {

// ---- 32-element blocks -----------------------------------------------------

void dequantize_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (x[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit quant j (0..31) of a Q5_0/Q5_1 block.
inline int q5_at(const uint8_t* qs, uint32_t qh, int j) {
  return j < 16 ? (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10) : (qs[j - 16] >> 4) | ((qh >> (j - 4)) & 0x10);
}

void dequantize_q5_0(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 32; ++j) y[j] = (q5_at(x[i].qs, qh, j) - 16) * d;
  }
}

void dequantize_q5_1(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 32; ++j) y[j] = q5_at(x[i].qs, qh, j) * d + m;
  }
}

void dequantize_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kvalues_iq4nl[x[i].qs[j] & 0xF];
      y[j + 16] = d * kvalues_iq4nl[x[i].qs[j] >> 4];
    }
  }
}

void dequantize_mxfp4(const block_mxfp4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = kvalues_mxfp4[x[i].qs[j] & 0xF] * d;
      y[j + 16] = kvalues_mxfp4[x[i].qs[j] >> 4] * d;
    }
  }
}

// ---- K-quants ----------------------------------------------------------------

void dequantize_q2_k(const block_q2_k* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int k = 0; k < qk_k; k += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int h = 0; h < 2; ++h) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * h] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_k(const block_q3_k* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const float d_all = fp16_to_fp32(x[i].d);
    int8_t scales[16];
    q3_k_scales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int k = 0; k < qk_k; k += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int h = 0; h < 2; ++h) {
          const float dl = d_all * scales[is++];
          for (int l = 0; l < 16; ++l)
            *y++ = dl * (((q[l + 16 * h] >> shift) & 3) - ((hm[l + 16 * h] & m) ? 0 : 4));
        }
      }
    }
  }
}

void dequantize_q5_k(const block_q5_k* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < qk_k; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void dequantize_iq4_xs(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const uint8_t* qs = x[i].qs;
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < qk_k / 32; ++ib, y += 32, qs += 16) {
      const float dl = d * (iq4_xs_scale(x[i], ib) - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kvalues_iq4nl[qs[j] & 0xF];
        y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
      }
    }
  }
}

// ---- reference quantizers (ggml's quantize_row_*_ref) --------------------------

// NOTE: (int8_t)(float) as ggml writes it: truncation toward zero of an in-range value.
inline int trunc_i8(float v) { return static_cast<int8_t>(static_cast<int>(v)); }

void quantize_q4_0(const float* x, block_q4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const uint8_t a = static_cast<uint8_t>(std::min(15, trunc_i8(x[j] * id + 8.5f)));
      const uint8_t b = static_cast<uint8_t>(std::min(15, trunc_i8(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(a | (b << 4));
    }
  }
}

void quantize_q4_1(const float* x, block_q4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < 16; ++j) {
      const uint8_t a = static_cast<uint8_t>(std::min(15, trunc_i8((x[j] - min) * id + 0.5f)));
      const uint8_t b = static_cast<uint8_t>(std::min(15, trunc_i8((x[j + 16] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(a | (b << 4));
    }
  }
}

// Packs 32 5-bit quants as Q5_0/Q5_1 do.
void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void quantize_q5_0(const float* x, block_q5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(std::min(31, trunc_i8(x[j] * id + 16.5f)));
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quantize_q5_1(const float* x, block_q5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(static_cast<int>((x[j] - min) * id + 0.5f));
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

int best_index_mxfp4(float x, float e) {
  int best = 0;
  float best_err = std::fabs(kvalues_mxfp4[0] * e - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kvalues_mxfp4[i] * e - x);
    if (err < best_err) best = i, best_err = err;
  }
  return best;
}

void quantize_mxfp4(const float* x, block_mxfp4* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = e8m0_to_fp32_half(e);
    y[i].e = e;
    for (int j = 0; j < 16; ++j)
      y[i].qs[j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[j + 16], d) << 4));
  }
}

// ---- IQ4_NL / IQ4_XS: ggml's quantize_row_iq4_nl_impl with ntry = 7 and no importance
// matrix, as llama-quantize (quantize_iq4_nl / quantize_iq4_xs) writes them.

int best_index_int8(int n, const int8_t* val, float x) {
  if (x <= val[0]) return 0;
  if (x >= val[n - 1]) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav;
    else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

void iq4_impl(int super_block_size, const float* x, uint16_t* dh, uint8_t* q4, uint16_t* scales_h, uint8_t* scales_l,
              float* scales, uint8_t* L) {
  constexpr int block_size = 32, ntry = 7;
  const int8_t* values = kvalues_iq4nl;
  float weight[32];
  std::memset(q4, 0, static_cast<size_t>(super_block_size / 2));
  dh[0] = fp32_to_fp16(0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < super_block_size / block_size; ++ib) {
    const float* xb = x + ib * block_size;
    uint8_t* Lb = L + ib * block_size;
    for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < block_size; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) amax = ax, max = xb[j];
    }
    if (amax < 1e-15f) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < block_size; ++j) {
      const float al = id * xb[j];
      const int l = best_index_int8(16, values, al);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < block_size; ++j) {
        const float al = id * xb[j];
        const int l = best_index_int8(16, values, al);
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    const float abs_d = std::fabs(d);
    if (abs_d > amax_scale) amax_scale = abs_d, max_scale = d;
  }
  if (super_block_size / block_size > 1) {
    const int nb = super_block_size / block_size;
    std::memset(scales_h, 0, static_cast<size_t>((nb + 7) / 8) * sizeof(uint16_t));
    const float d = -max_scale / 32;
    dh[0] = fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < nb; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      uint8_t* Lb = L + ib * block_size;
      const float* xb = x + ib * block_size;
      for (int j = 0; j < block_size; ++j) Lb[j] = static_cast<uint8_t>(best_index_int8(16, values, idl * xb[j]));
      l += 32;
      const uint8_t l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) scales_l[ib / 2] = l_l;
      else scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      scales_h[ib / 8] = static_cast<uint16_t>(scales_h[ib / 8] | (l_h << 2 * (ib % 8)));
    }
  } else {
    dh[0] = fp32_to_fp16(scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < super_block_size; ++j) L[j] = static_cast<uint8_t>(best_index_int8(16, values, id * x[j]));
  }
  for (int i = 0; i < super_block_size / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void quantize_iq4_nl(const float* x, block_iq4_nl* y, int64_t n) {
  uint8_t L[32] = {};
  float scale;
  uint16_t unused_h;
  for (int64_t i = 0; i < n / 32; ++i) iq4_impl(32, x + 32 * i, &y[i].d, y[i].qs, &unused_h, nullptr, &scale, L);
}

void quantize_iq4_xs(const float* x, block_iq4_xs* y, int64_t n) {
  uint8_t L[qk_k] = {};
  float scales[qk_k / 32];
  for (int64_t i = 0; i < n / qk_k; ++i)
    iq4_impl(qk_k, x + qk_k * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, scales, L);
}

}  // namespace

bool dequantize_more(weight_type t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case weight_type::q4_0: dequantize_q4_0(static_cast<const block_q4_0*>(src), dst, n); return true;
    case weight_type::q4_1: dequantize_q4_1(static_cast<const block_q4_1*>(src), dst, n); return true;
    case weight_type::q5_0: dequantize_q5_0(static_cast<const block_q5_0*>(src), dst, n); return true;
    case weight_type::q5_1: dequantize_q5_1(static_cast<const block_q5_1*>(src), dst, n); return true;
    case weight_type::iq4_nl: dequantize_iq4_nl(static_cast<const block_iq4_nl*>(src), dst, n); return true;
    case weight_type::mxfp4: dequantize_mxfp4(static_cast<const block_mxfp4*>(src), dst, n); return true;
    case weight_type::q2_k: dequantize_q2_k(static_cast<const block_q2_k*>(src), dst, n); return true;
    case weight_type::q3_k: dequantize_q3_k(static_cast<const block_q3_k*>(src), dst, n); return true;
    case weight_type::q5_k: dequantize_q5_k(static_cast<const block_q5_k*>(src), dst, n); return true;
    case weight_type::iq4_xs: dequantize_iq4_xs(static_cast<const block_iq4_xs*>(src), dst, n); return true;
    default: return false;
  }
}

bool quantize_more(weight_type t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case weight_type::q4_0: quantize_q4_0(src, static_cast<block_q4_0*>(dst), n); return true;
    case weight_type::q4_1: quantize_q4_1(src, static_cast<block_q4_1*>(dst), n); return true;
    case weight_type::q5_0: quantize_q5_0(src, static_cast<block_q5_0*>(dst), n); return true;
    case weight_type::q5_1: quantize_q5_1(src, static_cast<block_q5_1*>(dst), n); return true;
    case weight_type::mxfp4: quantize_mxfp4(src, static_cast<block_mxfp4*>(dst), n); return true;
    case weight_type::iq4_nl: quantize_iq4_nl(src, static_cast<block_iq4_nl*>(dst), n); return true;
    case weight_type::iq4_xs: quantize_iq4_xs(src, static_cast<block_iq4_xs*>(dst), n); return true;
    default: return false;
  }
}

}  // namespace agentq::kernels::detail
