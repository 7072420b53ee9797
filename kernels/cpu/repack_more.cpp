// The load-time layouts of Q4_0 (16 rows), Q5_K, IQ4_XS and Q3_K (8 rows) (block_q4_0x16, block_q5_kx8,
// block_iq4_xsx8, block_q3_kx8): repacking from the file blocks at load, and the scalar dot products
// that define their math.
#include <cmath>
#include <cstring>

#include "cpu/quants_internal.h"
#include "cpu/repack.h"

namespace agentq::kernels::detail {

namespace {

int q4_0_quant(const block_q4_0& b, int e) { return e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4; }
int q5_k_low4(const block_q5_k& b, int e) { return (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xF; }
int q5_k_bit5(const block_q5_k& b, int e) { return (b.qh[e % 32] >> (e / 32)) & 1; }
int iq4_xs_index(const block_iq4_xs& b, int e) {
  const int ib = e / 32, l = e % 32;
  return l < 16 ? b.qs[16 * ib + l] & 0xF : b.qs[16 * ib + l - 16] >> 4;
}

// Element e of a Q3_K super-block as its unsigned quant (value + 4, 0..7): per 128 elements
// (k), for each 2-bit shift s two runs of 16, the hmask bit 4k + s of byte e % 32 set for + 4.
int q3_k_quant(const block_q3_k& b, int e) {
  const int k = e / 128, s = (e % 128) / 32, l = e % 32;
  return ((b.qs[32 * k + l] >> (2 * s)) & 3) | (((b.hmask[l] >> (4 * k + s)) & 1) << 2);
}

// q3_k_x8's unsigned quant of element e of row r (the inverse of repack_q3_k_x8's packing).
int q3_k_x8_quant(const block_q3_kx8& b, int r, int e) {
  const int c = e / 16, f = (e % 16) / 4, j = e % 4, s = (e % 32) / 16;
  const int lo = (b.ql[32 * c + 4 * r + j] >> (2 * f)) & 3;
  const int hi = (b.qh[32 * (e / 32) + 4 * r + j] >> (4 * s + f)) & 1;
  return lo | (hi << 2);
}

}  // namespace

void repack_q4_0_x16(const block_q4_0* src, int64_t n_rows, int64_t nb, block_q4_0x16* dst) {
  for (int64_t g = 0; g < n_rows / 16; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q4_0x16& o = dst[g * nb + i];
      for (int r = 0; r < 16; ++r) {
        const block_q4_0& b = src[(g * 16 + r) * nb + i];
        o.d[r] = b.d;
        pack_nibbles(o.qs, 16, r, qk8_0, [&](int e) { return q4_0_quant(b, e); });
      }
    }
}

void repack_q5_k_x8(const block_q5_k* src, int64_t n_rows, int64_t nb, block_q5_kx8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q5_kx8& o = dst[g * nb + i];
      std::memset(o.qh, 0, sizeof(o.qh));
      for (int r = 0; r < 8; ++r) {
        const block_q5_k& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        o.dmin[r] = b.dmin;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          get_scale_min_k4(s, b.scales, &sc, &m);
          o.scales[x8_scale_at(s, r)] = sc;
          o.mins[x8_scale_at(s, r)] = m;
        }
        pack_nibbles(o.qs, 8, r, qk_k, [&](int e) { return q5_k_low4(b, e); });
        // Byte 32 h + 4 r + j of load L is chunk k = 2L + h of row r: elements 8k + j (low) and 8k + 4 + j (high).
        for (int L = 0; L < 16; ++L)
          for (int h = 0; h < 2; ++h)
            for (int j = 0; j < 4; ++j) {
              const int k = 2 * L + h, bit = 32 * h + 4 * r + j;
              o.qh[L][0] |= uint64_t(q5_k_bit5(b, 8 * k + j)) << bit;
              o.qh[L][1] |= uint64_t(q5_k_bit5(b, 8 * k + 4 + j)) << bit;
            }
      }
    }
}

void repack_iq4_xs_x8(const block_iq4_xs* src, int64_t n_rows, int64_t nb, block_iq4_xsx8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_iq4_xsx8& o = dst[g * nb + i];
      for (int r = 0; r < 8; ++r) {
        const block_iq4_xs& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        for (int s = 0; s < 8; ++s) o.scales[x8_scale_at(s, r)] = int8_t(iq4_xs_scale(b, s) - 32);
        pack_nibbles(o.qs, 8, r, qk_k, [&](int e) { return iq4_xs_index(b, e); });
      }
    }
}

void repack_q3_k_x8(const block_q3_k* src, int64_t n_rows, int64_t nb, block_q3_kx8* dst) {
  for (int64_t g = 0; g < n_rows / 8; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q3_kx8& o = dst[g * nb + i];
      std::memset(o.ql, 0, sizeof(o.ql));
      std::memset(o.qh, 0, sizeof(o.qh));
      for (int r = 0; r < 8; ++r) {
        const block_q3_k& b = src[(g * 8 + r) * nb + i];
        o.d[r] = b.d;
        int8_t sc[16];
        q3_k_scales(b.scales, sc);
        for (int s = 0; s < 16; ++s) o.scales[x8_scale_at(s, r)] = sc[s];
        for (int e = 0; e < qk_k; ++e) {
          const int u = q3_k_quant(b, e), f = (e % 16) / 4, j = e % 4, s = (e % 32) / 16;
          o.ql[32 * (e / 16) + 4 * r + j] = uint8_t(o.ql[32 * (e / 16) + 4 * r + j] | ((u & 3) << (2 * f)));
          o.qh[32 * (e / 32) + 4 * r + j] = uint8_t(o.qh[32 * (e / 32) + 4 * r + j] | ((u >> 2) << (4 * s + f)));
        }
      }
    }
}

float dot_q4_0_x16_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q4_0x16*>(group);
  auto x = reinterpret_cast<const block_q8_0x*>(xq);  // the blocks; the sums after them are not needed here
  float acc = 0;
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    int32_t s = 0;
    for (int e = 0; e < qk8_0; ++e) s += (x8_nibble(w[i].qs, 16, r, e) - 8) * x[i].qs[e];
    acc = std::fma(fp16_to_fp32(w[i].d[r]) * x[i].d, static_cast<float>(s), acc);  // the kernel's fmadd
  }
  return acc;
}

float dot_q5_k_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q5_kx8*>(group);
  auto x = reinterpret_cast<const block_q8_k*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q5_kx8& b = w[i];
    int32_t sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t dot = 0;
      for (int e = 32 * s; e < 32 * s + 32; ++e) {
        const int L = e / 16, byte = ((e / 8) % 2) * 32 + r * 4 + e % 4;
        const int bit5 = int((b.qh[L][e % 8 < 4 ? 0 : 1] >> byte) & 1);
        dot += (x8_nibble(b.qs, 8, r, e) | (bit5 << 4)) * x[i].qs[e];
      }
      const int at = x8_scale_at(s, r);
      sumi += b.scales[at] * dot;
      summ += b.mins[at] * (x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
    }
    acc = std::fma(fp16_to_fp32(b.d[r]) * x[i].d, static_cast<float>(sumi), acc);
    acc = std::fma(-(fp16_to_fp32(b.dmin[r]) * x[i].d), static_cast<float>(summ), acc);
  }
  return acc;
}

float dot_iq4_xs_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_iq4_xsx8*>(group);
  auto x = reinterpret_cast<const block_q8_k*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_iq4_xsx8& b = w[i];
    int32_t sumi = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t dot = 0;
      for (int e = 32 * s; e < 32 * s + 32; ++e) dot += kvalues_iq4nl[x8_nibble(b.qs, 8, r, e)] * x[i].qs[e];
      sumi += b.scales[x8_scale_at(s, r)] * dot;
    }
    acc = std::fma(fp16_to_fp32(b.d[r]) * x[i].d, static_cast<float>(sumi), acc);
  }
  return acc;
}

float dot_q3_k_x8_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q3_kx8*>(group);
  auto x = reinterpret_cast<const block_q8_k*>(xq);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t dot = 0;
      for (int e = 16 * s; e < 16 * s + 16; ++e) dot += (q3_k_x8_quant(w[i], r, e) - 4) * x[i].qs[e];
      isum += w[i].scales[x8_scale_at(s, r)] * dot;
    }
    // NOTE: no fma: dot_q3_k_scalar's multiply-then-add (built with -ffp-contract=off).
    acc += (fp16_to_fp32(w[i].d[r]) * x[i].d) * static_cast<float>(isum);
  }
  return acc;
}

void add_q8_0_sums(const block_q8_0x* blocks, int64_t nb, int32_t* sums8) {
  for (int64_t i = 0; i < nb; ++i) {
    int32_t s = 0;
    for (int j = 0; j < qk8_0; ++j) s += blocks[i].qs[j];
    sums8[i] = 8 * s;
  }
}

}  // namespace agentq::kernels::detail
