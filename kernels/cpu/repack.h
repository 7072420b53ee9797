// Private to kernels/cpu: the scalar math of the repacked layouts (repack.cpp, repack_more.cpp)
// and the repackers of repack_more.cpp.
#pragma once

#include <cstdint>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels::detail {

// The interleaved layouts' nibble order, G rows a group (8; q4_0_x16: 16): chunk k of row r
// holds elements 8k + j (low nibble) and 8k + 4 + j (high) at byte [k][r][j], j < 4.
inline int x8_nibble(const uint8_t* qs, int G, int r, int e) {
  const uint8_t byte = qs[(e / 8) * 4 * G + r * 4 + e % 4];
  return e % 8 < 4 ? byte & 0xF : byte >> 4;
}
// Writes row r's n_elems 4-bit fields quant(e) into qs in that order.
template <class Quant>
void pack_nibbles(uint8_t* qs, int G, int r, int n_elems, Quant quant) {
  for (int k = 0; k < n_elems / 8; ++k)
    for (int j = 0; j < 4; ++j) qs[k * 4 * G + r * 4 + j] = uint8_t(quant(8 * k + j) | (quant(8 * k + 4 + j) << 4));
}
// Where sub-block s's scale (or min) of row r sits in the x8 layouts' [pair][row][2] bytes.
inline int x8_scale_at(int s, int r) { return (s / 2) * 16 + r * 2 + s % 2; }

// Row r (< 8) of a group of 8 q8_0_x8 rows (n / 32 block_q8_0x8) against one Q8_0 activation:
// per block the exact int32 sum s, then acc = fma(d_r * d_x, s, acc).
float dot_q8_0_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);

// Row r (< 8) of a group of 8 q4_k_x8 rows (n / 256 block_q4_kx8 at `group`) against one
// Q8_K activation: per super-block the exact int32 sums of the scaled quants (sumi) and of
// the mins (summ), then acc = fma(d_r * d_x, sumi, acc); acc = fma(-(dmin_r * d_x), summ, acc).
float dot_q4_k_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);

// Row r (< 8) of a group of 8 q6_k_x8 rows against one Q8_K activation: per super-block the
// exact int32 sum of scaled (quant + 32) * x minus 32 * the scaled sums of x per 16, then
// acc = fma(d_r * d_x, that, acc).
float dot_q6_k_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);

// Row r (< 16) of a group of 16 q4_0_x16 rows against one Q8_0 activation (with its sums): per
// block the exact int32 s = sum (q - 8) x, then acc = fma(d_r * d_x, s, acc).
float dot_q4_0_x16_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);
// Row r of a group of q5_k_x8 rows against one Q8_K activation: as dot_q4_k_x8_scalar with
// 5-bit quants.
float dot_q5_k_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);
// Row r of a group of iq4_xs_x8 rows against one Q8_K activation: per super-block the exact
// int32 sumi = sum over sub-blocks of (scale - 32) * sum kvalues[q] x, then acc = fma(d_r * d_x, sumi, acc).
float dot_iq4_xs_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);

// Row r of a group of q3_k_x8 rows against one Q8_K activation: per super-block the exact int32
// isum = sum over 16-element sub-blocks of (scale - 32) * sum (q - 4) x, then acc += (d_r * d_x) *
// isum: dot_q3_k_scalar's float operations, so the repacked layout gives the file layout's bits.
float dot_q3_k_x8_scalar(const uint8_t* group, int r, const uint8_t* x, int64_t n);

void repack_q4_0_x16(const block_q4_0* src, int64_t n_rows, int64_t nb, block_q4_0x16* dst);
void repack_q5_k_x8(const block_q5_k* src, int64_t n_rows, int64_t nb, block_q5_kx8* dst);
void repack_iq4_xs_x8(const block_iq4_xs* src, int64_t n_rows, int64_t nb, block_iq4_xsx8* dst);
void repack_q3_k_x8(const block_q3_k* src, int64_t n_rows, int64_t nb, block_q3_kx8* dst);

// q4_0_x16's activations: the Q8_0 blocks, then sums8[i] = 8 * the sum of block i's quants.
void add_q8_0_sums(const block_q8_0x* blocks, int64_t nb, int32_t* sums8);

}  // namespace agentq::kernels::detail
