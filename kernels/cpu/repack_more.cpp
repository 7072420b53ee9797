// The load-time layouts of Q4_0 (16 rows), Q5_K and IQ4_XS (8 rows) (block_q4_0x16, block_q5_kx8, block_iq4_xsx8):
// repacking from the file blocks at load, and the scalar dot products that define their math.
#include <cmath>
#include <cstring>

#include "cpu/quants_internal.h"
#include "cpu/repack.h"

namespace agentq::kernels::detail {

namespace {

// Q4_K_x8's nibble order: chunk k of row r holds q[8k + j] | q[8k + 4 + j] << 4 at byte
// [k][r][j]; quant(e) gives a row's 4-bit field of element e.
template <class Quant>
void pack_nibbles_x8(uint8_t* qs, int r, int n_elems, Quant quant) {
  for (int k = 0; k < n_elems / 8; ++k)
    for (int j = 0; j < 4; ++j) qs[k * 32 + r * 4 + j] = uint8_t(quant(8 * k + j) | (quant(8 * k + 4 + j) << 4));
}

// The 4-bit field of element e of row r in an x8 block's [chunk][row][4] nibbles.
int x8_field(const uint8_t* qs, int r, int e) {
  const uint8_t byte = qs[(e / 8) * 32 + r * 4 + e % 4];
  return e % 8 < 4 ? byte & 0xF : byte >> 4;
}

int q4_0_quant(const block_q4_0& b, int e) { return e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4; }
int q5_k_low4(const block_q5_k& b, int e) { return (b.qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xF; }
int q5_k_bit5(const block_q5_k& b, int e) { return (b.qh[e % 32] >> (e / 32)) & 1; }
int iq4_xs_index(const block_iq4_xs& b, int e) {
  const int ib = e / 32, l = e % 32;
  return l < 16 ? b.qs[16 * ib + l] & 0xF : b.qs[16 * ib + l - 16] >> 4;
}

}  // namespace

void repack_q4_0_x16(const block_q4_0* src, int64_t n_rows, int64_t nb, block_q4_0x16* dst) {
  for (int64_t g = 0; g < n_rows / 16; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      block_q4_0x16& o = dst[g * nb + i];
      for (int r = 0; r < 16; ++r) {
        const block_q4_0& b = src[(g * 16 + r) * nb + i];
        o.d[r] = b.d;
        for (int k = 0; k < 4; ++k)
          for (int j = 0; j < 4; ++j)
            o.qs[64 * k + 4 * r + j] = uint8_t(q4_0_quant(b, 8 * k + j) | (q4_0_quant(b, 8 * k + 4 + j) << 4));
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
          o.scales[(s / 2) * 16 + r * 2 + s % 2] = sc;
          o.mins[(s / 2) * 16 + r * 2 + s % 2] = m;
        }
        pack_nibbles_x8(o.qs, r, 256, [&](int e) { return q5_k_low4(b, e); });
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
        for (int s = 0; s < 8; ++s) o.scales[(s / 2) * 16 + r * 2 + s % 2] = int8_t(iq4_xs_scale(b, s) - 32);
        pack_nibbles_x8(o.qs, r, 256, [&](int e) { return iq4_xs_index(b, e); });
      }
    }
}

float dot_q4_0_x16_scalar(const uint8_t* group, int r, const uint8_t* xq, int64_t n) {
  auto w = reinterpret_cast<const block_q4_0x16*>(group);
  auto x = reinterpret_cast<const block_q8_0x*>(xq);  // the blocks; the sums after them are not needed here
  float acc = 0;
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    int32_t s = 0;
    for (int e = 0; e < qk8_0; ++e) {
      const uint8_t byte = w[i].qs[64 * (e / 8) + 4 * r + e % 4];
      s += ((e % 8 < 4 ? byte & 0xF : byte >> 4) - 8) * x[i].qs[e];
    }
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
        dot += (x8_field(b.qs, r, e) | (bit5 << 4)) * x[i].qs[e];
      }
      const int at = (s / 2) * 16 + r * 2 + s % 2;
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
      for (int e = 32 * s; e < 32 * s + 32; ++e) dot += kvalues_iq4nl[x8_field(b.qs, r, e)] * x[i].qs[e];
      sumi += b.scales[(s / 2) * 16 + r * 2 + s % 2] * dot;
    }
    acc = std::fma(fp16_to_fp32(b.d[r]) * x[i].d, static_cast<float>(sumi), acc);
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
