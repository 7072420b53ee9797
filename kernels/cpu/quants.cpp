// Weight formats: type geometry, ggml's reference quantizers (quantize_row_*_ref)
// and dequantizers for F32/F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K (the other formats: quants_more.cpp),
// plus the 8-bit activation formats.
#include <algorithm>
#include <cmath>
#include <cstring>
#if (defined(__F16C__) && defined(__AVX__)) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "agentq/kernels.h"
#include "cpu/check.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels {

using detail::nearest_int;

int64_t block_elems(weight_type t) {
  switch (t) {
    case weight_type::f32: case weight_type::f16: case weight_type::bf16: return 1;
    case weight_type::q8_0: case weight_type::q8_0_x8: case weight_type::q4_0_x16: return qk8_0;
    case weight_type::q4_0: case weight_type::q4_1: case weight_type::q5_0: case weight_type::q5_1:
    case weight_type::iq4_nl: case weight_type::mxfp4: return 32;
    case weight_type::q4_k: case weight_type::q6_k: case weight_type::q4_k_x8: case weight_type::q6_k_x8: return qk_k;
    case weight_type::q2_k: case weight_type::q3_k: case weight_type::q5_k: case weight_type::iq4_xs: return qk_k;
    case weight_type::q5_k_x8: case weight_type::iq4_xs_x8: case weight_type::q3_k_x8: return qk_k;
  }
  return 0;
}

size_t block_bytes(weight_type t) {
  switch (t) {
    case weight_type::f32: return 4;
    case weight_type::f16: case weight_type::bf16: return 2;
    case weight_type::q8_0: return sizeof(block_q8_0);
    case weight_type::q4_k: return sizeof(block_q4_k);
    case weight_type::q6_k: return sizeof(block_q6_k);
    case weight_type::q4_0: return sizeof(block_q4_0);
    case weight_type::q4_1: return sizeof(block_q4_1);
    case weight_type::q5_0: return sizeof(block_q5_0);
    case weight_type::q5_1: return sizeof(block_q5_1);
    case weight_type::iq4_nl: return sizeof(block_iq4_nl);
    case weight_type::mxfp4: return sizeof(block_mxfp4);
    case weight_type::q2_k: return sizeof(block_q2_k);
    case weight_type::q3_k: return sizeof(block_q3_k);
    case weight_type::q5_k: return sizeof(block_q5_k);
    case weight_type::iq4_xs: return sizeof(block_iq4_xs);
    case weight_type::q8_0_x8: return sizeof(block_q8_0x8) / 8;
    case weight_type::q4_k_x8: return sizeof(block_q4_kx8) / 8;
    case weight_type::q6_k_x8: return sizeof(block_q6_kx8) / 8;
    case weight_type::q4_0_x16: return sizeof(block_q4_0x16) / 16;
    case weight_type::q5_k_x8: return sizeof(block_q5_kx8) / 8;
    case weight_type::iq4_xs_x8: return sizeof(block_iq4_xsx8) / 8;
    case weight_type::q3_k_x8: return sizeof(block_q3_kx8) / 8;
  }
  return 0;
}

size_t row_bytes(weight_type t, int64_t n) {
  AGENTQ_KCHECK(n % block_elems(t) == 0);
  return static_cast<size_t>(n / block_elems(t)) * block_bytes(t);
}

bool is_weight_type(uint32_t id) {
  switch (id) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 10: case 11: case 12: case 13: case 14:
    case 20: case 23: case 30: case 39:
      return true;
    default:
      return false;
  }
}

const char* name_of(weight_type t) {
  switch (t) {
    case weight_type::f32: return "f32";
    case weight_type::f16: return "f16";
    case weight_type::bf16: return "bf16";
    case weight_type::q8_0: return "q8_0";
    case weight_type::q4_k: return "q4_k";
    case weight_type::q6_k: return "q6_k";
    case weight_type::q4_0: return "q4_0";
    case weight_type::q4_1: return "q4_1";
    case weight_type::q5_0: return "q5_0";
    case weight_type::q5_1: return "q5_1";
    case weight_type::iq4_nl: return "iq4_nl";
    case weight_type::mxfp4: return "mxfp4";
    case weight_type::q2_k: return "q2_k";
    case weight_type::q3_k: return "q3_k";
    case weight_type::q5_k: return "q5_k";
    case weight_type::iq4_xs: return "iq4_xs";
    case weight_type::q8_0_x8: return "q8_0_x8";
    case weight_type::q4_k_x8: return "q4_k_x8";
    case weight_type::q6_k_x8: return "q6_k_x8";
    case weight_type::q4_0_x16: return "q4_0_x16";
    case weight_type::q5_k_x8: return "q5_k_x8";
    case weight_type::iq4_xs_x8: return "iq4_xs_x8";
    case weight_type::q3_k_x8: return "q3_k_x8";
  }
  return "unknown";
}

namespace {

constexpr float group_max_eps = 1e-15f;

// ---- Q8_0 ------------------------------------------------------------------

void quantize_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / qk8_0; ++i, x += qk8_0) {
    float amax = 0;
    for (int j = 0; j < qk8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < qk8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void dequantize_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < qk8_0; ++j) *y++ = x[i].qs[j] * d;
  }
}

// ---- Q4_K ------------------------------------------------------------------

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void quantize_q4_k(const float* x, block_q4_k* y, int64_t n) {
  uint8_t L[qk_k];
  uint8_t Laux[32];
  float weights[32];
  float mins[qk_k / 32];
  float scales[qk_k / 32];
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < qk_k / 32; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    for (int j = 0; j < qk_k / 32; ++j) {
      uint8_t ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
      uint8_t lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
      if (j < 4) {
        y[i].scales[j] = ls;
        y[i].scales[j + 4] = lm;
      } else {
        y[i].scales[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
        y[i].scales[j - 4] |= ((ls >> 4) << 6);
        y[i].scales[j - 0] |= ((lm >> 4) << 6);
      }
    }
    y[i].d = fp32_to_fp16(max_scale / 63.f);
    y[i].dmin = fp32_to_fp16(max_min / 63.f);
    uint8_t sc, m;
    for (int j = 0; j < qk_k / 32; ++j) {
      detail::get_scale_min_k4(j, y[i].scales, &sc, &m);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (!d) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * m;
      for (int ii = 0; ii < 32; ++ii) {
        int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(15, l)));
      }
    }
    uint8_t* q = y[i].qs;
    for (int j = 0; j < qk_k; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
      q += 32;
    }
  }
}

void dequantize_q4_k(const block_q4_k* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < qk_k; j += 64) {
      detail::get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      detail::get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

// ---- Q2_K, Q3_K (dequantizers: quants_more.cpp) ------------------------------

void quantize_q2_k(const float* x, block_q2_k* y, int64_t n) {
  uint8_t L[qk_k];
  uint8_t Laux[16];
  float weights[16];
  float mins[qk_k / 16];
  float scales[qk_k / 16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < qk_k / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < qk_k / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < qk_k / 16; ++j) y[i].scales[j] = 0;
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < qk_k / 16; ++j) y[i].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < qk_k / 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    for (int j = 0; j < qk_k; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < group_max_eps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quantize_q3_k(const float* x, block_q3_k* y, int64_t n) {
  int8_t L[qk_k];
  float scales[qk_k / 16];
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < qk_k / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) amax = scale, max_scale = scales[j];
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < qk_k / 16; ++j) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        else y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        l = static_cast<int8_t>(l >> 4);
        y[i].scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < qk_k / 16; ++j) {
      int8_t sc = static_cast<int8_t>(j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4);
      sc = static_cast<int8_t>((sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    std::memset(y[i].hmask, 0, qk_k / 8);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < qk_k; ++j) {
      if (L[j] > 3) {
        y[i].hmask[m] |= hm;
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
      if (++m == qk_k / 8) m = 0, hm = static_cast<uint8_t>(hm << 1);
    }
    for (int j = 0; j < qk_k; j += 128)
      for (int l = 0; l < 32; ++l)
        y[i].qs[j / 4 + l] =
            static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  }
}

// ---- Q5_K (dequantize_q5_k: quants_more.cpp) --------------------------------

void quantize_q5_k(const float* x, block_q5_k* y, int64_t n) {
  uint8_t L[qk_k];
  uint8_t Laux[32];
  float weights[32];
  float mins[qk_k / 32];
  float scales[qk_k / 32];
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < qk_k / 32; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    for (int j = 0; j < qk_k / 32; ++j) {
      // NOTE: ggml stores nearest_int into a uint8_t before MIN(63, .): the same wrap here.
      uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
      uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
      ls = std::min<uint8_t>(63, ls);
      lm = std::min<uint8_t>(63, lm);
      if (j < 4) {
        y[i].scales[j] = ls;
        y[i].scales[j + 4] = lm;
      } else {
        y[i].scales[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
        y[i].scales[j - 4] |= ((ls >> 4) << 6);
        y[i].scales[j - 0] |= ((lm >> 4) << 6);
      }
    }
    y[i].d = fp32_to_fp16(max_scale / 63.f);
    y[i].dmin = fp32_to_fp16(max_min / 63.f);
    uint8_t sc, m;
    for (int j = 0; j < qk_k / 32; ++j) {
      detail::get_scale_min_k4(j, y[i].scales, &sc, &m);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (!d) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * m;
      for (int ii = 0; ii < 32; ++ii) {
        int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(31, l)));
      }
    }
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, qk_k / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int k = 0; k < qk_k; k += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[k + j];
        if (l1 > 15) l1 -= 16, qh[j] |= m1;
        int l2 = L[k + j + 32];
        if (l2 > 15) l2 -= 16, qh[j] |= m2;
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
      ql += 32;
    }
  }
}

// ---- Q6_K ------------------------------------------------------------------

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < group_max_eps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  auto weight = [&](float v) -> float {
    return rmse_type == 1 ? v * v : rmse_type == 2 ? 1 : rmse_type == 3 ? std::fabs(v) : std::sqrt(std::fabs(v));
  };
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    float w = weight(x[i]);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      float w = weight(x[i]);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_q6_k(const float* x, block_q6_k* y, int64_t n) {
  int8_t L[qk_k];
  float scales[qk_k / 16];
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < qk_k / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < group_max_eps) {
      std::memset(&y[i], 0, sizeof(block_q6_k));
      continue;
    }
    float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < qk_k / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < qk_k / 16; ++j) {
      float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < qk_k; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = q1 | (q3 << 4);
        ql[l + 32] = q2 | (q4 << 4);
        qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                ((L[j + l + 96] >> 4) << 6);
      }
      ql += 64;
      qh += 32;
    }
  }
}

void dequantize_q6_k(const block_q6_k* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int j = 0; j < qk_k; j += 128) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

}  // namespace

void dequantize_row(weight_type t, const void* src, float* dst, int64_t n) {
  AGENTQ_KCHECK(n % block_elems(t) == 0);
  switch (t) {
    case weight_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case weight_type::f16: {
      auto s = static_cast<const uint16_t*>(src);
      int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
      // NOTE: F16C is exact and IEEE like the scalar conversion; the F16 K/V cache converts
      // every stored row, so this is on the forward pass.
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
      for (; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case weight_type::bf16: {
      auto s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case weight_type::q8_0: dequantize_q8_0(static_cast<const block_q8_0*>(src), dst, n); return;
    case weight_type::q4_k: dequantize_q4_k(static_cast<const block_q4_k*>(src), dst, n); return;
    case weight_type::q6_k: dequantize_q6_k(static_cast<const block_q6_k*>(src), dst, n); return;
    case weight_type::q8_0_x8: case weight_type::q4_k_x8: case weight_type::q6_k_x8:
    case weight_type::q4_0_x16: case weight_type::q5_k_x8: case weight_type::iq4_xs_x8: case weight_type::q3_k_x8:
      break;  // rows interleaved by 8: no single row
    default:
      if (detail::dequantize_more(t, src, dst, n)) return;
      break;
  }
  AGENTQ_KCHECK(!"unknown weight type");
}

bool has_quantizer(weight_type t) {
  switch (t) {
    case weight_type::f32: case weight_type::f16: case weight_type::bf16: case weight_type::q8_0:
    case weight_type::q4_k: case weight_type::q5_k: case weight_type::q6_k: case weight_type::q4_0:
    case weight_type::q4_1: case weight_type::q5_0: case weight_type::q5_1: case weight_type::mxfp4:
    case weight_type::iq4_nl: case weight_type::iq4_xs: case weight_type::q2_k: case weight_type::q3_k:
      return true;
    default:
      return false;
  }
}

void quantize_row(weight_type t, const float* src, void* dst, int64_t n) {
  AGENTQ_KCHECK(n % block_elems(t) == 0);
  switch (t) {
    case weight_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case weight_type::f16: {
      auto d = static_cast<uint16_t*>(dst);
      int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
      // NOTE: round to nearest even, as fp32_to_fp16: the same bits for every finite value.
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
      for (; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case weight_type::bf16: {
      auto d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case weight_type::q8_0: quantize_q8_0(src, static_cast<block_q8_0*>(dst), n); return;
    case weight_type::q4_k: quantize_q4_k(src, static_cast<block_q4_k*>(dst), n); return;
    case weight_type::q6_k: quantize_q6_k(src, static_cast<block_q6_k*>(dst), n); return;
    case weight_type::q5_k: quantize_q5_k(src, static_cast<block_q5_k*>(dst), n); return;
    case weight_type::q2_k: quantize_q2_k(src, static_cast<block_q2_k*>(dst), n); return;
    case weight_type::q3_k: quantize_q3_k(src, static_cast<block_q3_k*>(dst), n); return;
    case weight_type::q8_0_x8: case weight_type::q4_k_x8: case weight_type::q6_k_x8:
    case weight_type::q4_0_x16: case weight_type::q5_k_x8: case weight_type::iq4_xs_x8: case weight_type::q3_k_x8:
      break;  // layouts made by repack()
    default:
      if (detail::quantize_more(t, src, dst, n)) return;
      break;
  }
  AGENTQ_KCHECK(!"no quantizer for this weight type");
}

namespace detail {

#if defined(__AVX2__)
namespace {
// nearest_int per lane: the same float add, then the same integer ops on its bits.
inline __m256i nearest_int8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
  return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}
// The low bytes of 4 x 8 int32 lanes, in order: each int32 -> int8 wraps, as static_cast
// (masked to 0..255 first, so the packs never saturate).
inline __m256i low_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i m = _mm256_set1_epi32(0xFF);
  const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, m), _mm256_and_si256(b, m));
  const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, m), _mm256_and_si256(d, m));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
// max |x| over n (a multiple of 8) floats; NaNs never raise it (max_ps(a, b) is b when a is
// NaN), as the scalar `ax > amax` / std::max(amax, ax).
inline float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), vmax);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}
// The first j in [0, n) with |x[j]| == amax, for amax = abs_max(x, n) > 0 (so there is one):
// the scalar search's index, 8 lanes at a time.
inline int first_abs_equal(const float* x, int n, float amax) {
  const __m256 sign = _mm256_set1_ps(-0.0f), m = _mm256_set1_ps(amax);
  int j = 0;
  for (; j + 8 < n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m, _CMP_EQ_OQ));
    if (hit) return j + __builtin_ctz(unsigned(hit));
  }
  const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m, _CMP_EQ_OQ));
  return j + (hit ? __builtin_ctz(unsigned(hit)) : 7);  // NOTE: the last block holds it if no earlier one did
}
}  // namespace
#endif

// Q8_0 activations: per 32 floats d = max |x| / 127, quants nearest_int(x / d). The AVX2 path
// gives the same bits (test_kernels_quant), as quantize_act_q8_k's.
void quantize_act_q8_0(const float* x, block_q8_0x* y, int64_t n) {
  for (int64_t i = 0; i < n / qk8_0; ++i, x += qk8_0) {
#if defined(__AVX2__)
    const float amax = abs_max(x, qk8_0);
#else
    float amax = 0;
    for (int j = 0; j < qk8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
#endif
    const float d = amax / 127.f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = d;
#if defined(__AVX2__)
    const __m256 vid = _mm256_set1_ps(id);
    auto q = [&](int j) { return nearest_int8(_mm256_mul_ps(_mm256_loadu_ps(x + j), vid)); };
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), low_bytes(q(0), q(8), q(16), q(24)));
#else
    for (int j = 0; j < qk8_0; ++j) y[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
#endif
  }
}

// Q8_K activations, per 256 floats: the value of largest magnitude (the first, if tied)
// sets the scale (NaNs never do); quants by ggml's nearest_int, clamped at 127; sums per 16.
// The AVX2 path gives the same bits (test_kernels_quant), as quantize_act_q8_0's. Decode
// quantizes every matvec's input on the calling thread, between pool jobs, so this is on the
// step's serial path.
void quantize_act_q8_k(const float* x, block_q8_k* y, int64_t n) {
  for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
#if defined(__AVX2__)
    const float amax = abs_max(x, qk_k);
#else
    float amax = 0;
    for (int j = 0; j < qk_k; ++j) amax = std::max(amax, std::fabs(x[j]));
#endif
    if (!amax) {
      std::memset(&y[i], 0, sizeof(block_q8_k));
      continue;
    }
#if defined(__AVX2__)
    const int first = first_abs_equal(x, qk_k, amax);
#else
    int first = 0;
    while (!(std::fabs(x[first]) == amax)) ++first;
#endif
    const float iscale = -127.f / x[first];
#if defined(__AVX2__)
    const __m256 vs = _mm256_set1_ps(iscale);
    auto q = [&](int j) {
      return _mm256_min_epi32(nearest_int8(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j))), _mm256_set1_epi32(127));
    };
    // NOTE: the sums per 16 from the quants still in a register (psadbw of the bytes biased to
    // unsigned, 8 x 128 off per 8-byte lane): read back from y, each waited on its stores.
    const __m256i bias = _mm256_set1_epi8(char(0x80));
    for (int j = 0; j < qk_k; j += 32) {
      const __m256i q8 = low_bytes(q(j), q(j + 8), q(j + 16), q(j + 24));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), q8);
      const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q8, bias), _mm256_setzero_si256());
      y[i].bsums[j / 16] = static_cast<int16_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) - 2048);
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3) - 2048);
    }
#else
    for (int j = 0; j < qk_k; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < qk_k / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
#endif
    y[i].d = 1 / iscale;
  }
}

}  // namespace detail
}  // namespace agentq::kernels
