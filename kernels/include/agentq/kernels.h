// agentq kernels — the one public header of the CPU kernel library.
// Plain functions over raw pointers and shapes; no engine types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace agentq::kernels {

// ---------------------------------------------------------------------------
// Scalars

// IEEE half and bfloat16 conversions (round-to-nearest-even on the way down).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
inline float bf16_to_fp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

// ---------------------------------------------------------------------------
// Weight formats (ggml type ids and block layouts, byte for byte)

// The _x8 / _x16 types are not file formats: they are Q8_0, Q4_K, Q6_K, Q4_0, Q5_K, IQ4_XS and
// Q3_K repacked at load for the CPU where the build has the AVX2 kernels (see repack()), with
// ids outside ggml's range (0x1000 | the file type's id; 0x2000 | it for 16-row groups).
enum class weight_type : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12,
  q5_k = 13, q6_k = 14, iq4_nl = 20, iq4_xs = 23, bf16 = 30, mxfp4 = 39,
  q8_0_x8 = 0x1008, q4_k_x8 = 0x100c, q6_k_x8 = 0x100e, q4_0_x16 = 0x2002, q5_k_x8 = 0x100d, iq4_xs_x8 = 0x1017,
  q3_k_x8 = 0x100b
};

constexpr int64_t qk8_0 = 32;   // elements per Q8_0 block
constexpr int64_t qk_k = 256;   // elements per K-quant super-block

struct block_q8_0 {
  uint16_t d;          // fp16 scale
  int8_t qs[qk8_0];    // x = d * qs
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q4_k {
  uint16_t d;          // fp16 super-scale of the 6-bit sub-block scales
  uint16_t dmin;       // fp16 super-scale of the 6-bit sub-block mins
  uint8_t scales[12];  // 8 scales + 8 mins, 6 bits each (ggml's get_scale_min_k4 packing)
  uint8_t qs[qk_k / 2];  // 4-bit quants; per 64 elements: low nibbles first 32, high nibbles next 32
};
static_assert(sizeof(block_q4_k) == 144);

struct block_q6_k {
  uint8_t ql[qk_k / 2];  // low 4 bits of the quants
  uint8_t qh[qk_k / 4];  // high 2 bits
  int8_t scales[qk_k / 16];  // 8-bit scale per 16 elements
  uint16_t d;            // fp16 super-scale
};
static_assert(sizeof(block_q6_k) == 210);

// The other ggml block formats (ggml-common.h), byte for byte; dequantize_row gives ggml's
// dequantize_row_* values bit for bit (see quants_more.cpp).
struct block_q4_0 { uint16_t d; uint8_t qs[16]; };                  // x = d * (q - 8)
struct block_q4_1 { uint16_t d, m; uint8_t qs[16]; };               // x = d * q + m
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };   // x = d * (q - 16), bit 4 in qh
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };  // x = d * q + m
struct block_iq4_nl { uint16_t d; uint8_t qs[16]; };                // x = d * kvalues_iq4nl[q]
struct block_mxfp4 { uint8_t e; uint8_t qs[16]; };                  // x = 2^(e-128) * kvalues_fp4[q]
static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
              sizeof(block_q5_1) == 24 && sizeof(block_iq4_nl) == 18 && sizeof(block_mxfp4) == 17);
// Q2_K: 16 sub-blocks of 16, 4-bit scale | 4-bit min per sub-block; x = d*sc*q - dmin*m.
struct block_q2_k { uint8_t scales[qk_k / 16]; uint8_t qs[qk_k / 4]; uint16_t d, dmin; };
static_assert(sizeof(block_q2_k) == 84);
// Q3_K: 16 sub-blocks of 16, 6-bit signed scales (packed in 12 bytes), x = d*(sc-32)*(q - 4*!hbit).
struct block_q3_k { uint8_t hmask[qk_k / 8]; uint8_t qs[qk_k / 4]; uint8_t scales[12]; uint16_t d; };
static_assert(sizeof(block_q3_k) == 110);
// Q5_K: Q4_K plus a fifth bit per quant in qh.
struct block_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[qk_k / 8]; uint8_t qs[qk_k / 2]; };
static_assert(sizeof(block_q5_k) == 176);
// IQ4_XS: 8 sub-blocks of 32, 6-bit scales (low 4 bits in scales_l, high 2 in scales_h), IQ4_NL values.
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[qk_k / 64]; uint8_t qs[qk_k / 2]; };
static_assert(sizeof(block_iq4_xs) == 136);

// Q8_0_x8: one block of 8 consecutive rows of a Q8_0 matrix, interleaved as block_q4_kx8
// (the same bytes as 8 block_q8_0): one 256-bit vector holds 4 elements of each row.
struct block_q8_0x8 {
  uint16_t d[8];         // fp16 scale of each row's block
  int8_t qs[qk8_0 * 8];  // [chunk k < 8][row r][j < 4]: element 4k + j of row r
};
static_assert(sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0));

// Q4_K_x8: one super-block of 8 consecutive rows of a Q4_K matrix, interleaved so that one
// 256-bit vector holds 8 elements of each of the 8 rows, and the scales are unpacked bytes.
// NOTE: the decode kernel then yields the 8 rows' sums in the 8 lanes of one register:
// no per-row scale unpacking, shuffles or horizontal sums (about half the vector ops of
// the row-at-a-time Q4_K kernel, which was compute-bound below the memory roofline).
struct block_q4_kx8 {
  uint16_t d[8];         // fp16 super-scale of each row's sub-block scales
  uint16_t dmin[8];      // fp16 super-scale of each row's sub-block mins
  uint8_t scales[64];    // [pair p < 4][row r < 8][2]: 6-bit scales of sub-blocks 2p, 2p + 1
  uint8_t mins[64];      // the mins, same order
  uint8_t qs[qk_k * 4];  // [chunk k < 32][row r][j < 4]: q[8k + j] | q[8k + 4 + j] << 4
};
static_assert(sizeof(block_q4_kx8) == 1184);

// Q6_K_x8: one super-block of 8 consecutive rows of a Q6_K matrix (the same bytes as 8
// block_q6_k), laid out as block_q4_kx8: the low 4 bits of each quant as Q4_K_x8's qs, the
// high 2 bits of 16 elements of a row in one byte-aligned group of 4 bytes.
struct block_q6_kx8 {
  uint16_t d[8];         // fp16 super-scale of each row
  int8_t scales[128];    // [pair p < 8][row r][2]: 8-bit scales of 16-element sub-blocks 2p, 2p + 1
  uint8_t ql[qk_k * 4];  // [chunk k < 32][row r][j < 4]: low bits of q[8k + j] | q[8k + 4 + j] << 4
  uint8_t qh[qk_k * 2];  // [chunk pair c < 16][row r][j < 4]: high 2 bits of q[16c + j], q[16c + 4 + j],
                         //   q[16c + 8 + j], q[16c + 12 + j] at bits 0, 2, 4, 6
};
static_assert(sizeof(block_q6_kx8) == 8 * sizeof(block_q6_k));

// Q4_0_x16: one block of 32 of 16 consecutive rows of a Q4_0 matrix (the same 288 bytes as 16
// block_q4_0): each 64-byte quarter holds 8 elements of each row, 4 bytes a row, so the 16
// rows' low (high) nibbles meet the same 4 activation bytes (one dword broadcast) and the 16
// rows' sums land in the 16 lanes of one register.
// NOTE: 16 rows, not 8 as the other layouts: the per-block float work (scale, convert, fma)
// then covers 16 rows per op, and a 32-element block has little else to amortize it over.
// Its activations are Q8_0 blocks followed by 8 * each block's sum of quants (int32), so the
// kernels take the unsigned nibbles (value + 8) and subtract that once per block.
struct block_q4_0x16 {
  uint16_t d[16];         // fp16 scale of each row's block
  uint8_t qs[qk8_0 * 8];  // [chunk k < 4][row r < 16][j < 4]: q[8k + j] | q[8k + 4 + j] << 4 (unsigned)
};
static_assert(sizeof(block_q4_0x16) == 288);

// Q5_K_x8: Q4_K_x8 (the same first five fields, so the same tail code) plus the fifth bits:
// for each 64-byte load L of qs (chunks 2L, 2L + 1), a 64-bit mask over its bytes for the low
// nibbles' fifth bit and one for the high nibbles' (an AVX-512 byte mask, applied as +16).
struct block_q5_kx8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[64];    // [pair p < 4][row r < 8][2], as block_q4_kx8
  uint8_t mins[64];
  uint8_t qs[qk_k * 4];  // as block_q4_kx8: the low 4 bits
  uint64_t qh[16][2];    // [load L][low / high nibbles]: bit b = fifth bit of qs byte 64 L + b's element
};
static_assert(sizeof(block_q5_kx8) == 1440);

// IQ4_XS_x8: one super-block of 8 rows of an IQ4_XS matrix: the 4-bit indices in Q4_K_x8's
// order, the 6-bit scales unpacked to int8 (ls - 32) in [pair][row][2] order.
struct block_iq4_xsx8 {
  uint16_t d[8];
  int8_t scales[64];     // [pair p < 4][row r < 8][2]: scale - 32 of sub-blocks 2p, 2p + 1
  uint8_t qs[qk_k * 4];  // [chunk k < 32][row r][j < 4]: index of q[8k + j] | q[8k + 4 + j] << 4
};
static_assert(sizeof(block_iq4_xsx8) == 1104);

// Q3_K_x8: one super-block of 8 rows of a Q3_K matrix, the 3-bit quants stored unsigned
// (value + 4, 0..7) as a 2-bit plane and a 1-bit plane, both in [..][row r][j < 4] order so one
// 32-byte load meets 4 elements of every row (as block_q6_kx8's qh), and the 6-bit scales
// unpacked to int8. 912 bytes against the file's 8 x 110 = 880 (+3.6%).
// NOTE: not a 4-bit (nibble) layout, whose unpacking is cheaper: it would hold 4.6 bits per
// weight in memory, Q4_K's footprint, which is what a Q3_K user chose against.
struct block_q3_kx8 {
  uint16_t d[8];          // fp16 super-scale of each row
  int8_t scales[128];     // [pair p < 8][row r][2]: scale - 32 of 16-element sub-blocks 2p, 2p + 1
  uint8_t ql[qk_k * 2];   // [sub-block c < 16][row r][j < 4]: low 2 bits of q[16c + 4f + j] at bits 2f (f < 4)
  uint8_t qh[qk_k];       // [pair p < 8][row r][j < 4]: high bit of q[32p + 16s + 4f + j] at bit 4s + f
};
static_assert(sizeof(block_q3_kx8) == 912);

// Elements per block (1 for float types); 0 for an unknown id.
int64_t block_elems(weight_type t);
// Bytes per block; 0 for an unknown id. For the _x8 layouts, one row's share of a block
// (q4_k_x8: 1184 / 8 = 148), so row_bytes() is the average bytes per row of such a matrix.
size_t block_bytes(weight_type t);
// Bytes of one row of n elements; n must be a multiple of block_elems(t).
size_t row_bytes(weight_type t, int64_t n);
// True for the ids above.
bool is_weight_type(uint32_t id);
const char* name_of(weight_type t);

// Unpack n elements (n a multiple of block_elems(t)) of one row to float.
void dequantize_row(weight_type t, const void* src, float* dst, int64_t n);
// Pack n floats into t's format; the quantizers are ggml's reference ones
// (quantize_row_*_ref), so files written with them match llama.cpp's.
void quantize_row(weight_type t, const float* src, void* dst, int64_t n);
// Whether quantize_row has a quantizer for t: every file type (byte for byte what
// llama-quantize writes without an importance matrix; IQ4_NL / IQ4_XS: its search with
// ntry 7, not ggml's quantize_row_*_ref). False for the _x8 layouts.
bool has_quantizer(weight_type t);

// ---------------------------------------------------------------------------
// Matrix products. W is [n_rows][n_cols] in format t, row r at w + r*row_stride_bytes.
// NOTE: batch invariance — y[b][r] depends only on W[r] and x[b]: every path uses
// one per-row dot routine with a fixed accumulation order, whatever n_x or the row
// range; blocking only changes which (b, r) pairs are computed when.

// For every b < n_x and r in [row_begin, row_end):
//   y[b*n_rows + r] = dot(W[r, :], x[b*n_cols : (b+1)*n_cols])
// x: [n_x][n_cols], y: [n_x][n_rows]. n_cols must be a multiple of block_elems(t).
// Quantized types quantize x to 8 bits internally (per calling thread); callers
// that split rows across threads can quantize once with quantize_activations and
// call matmul_prequantized instead (same results, bit for bit).
void matmul(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols,
            const float* x, int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows);

// Bytes needed to hold n_x activation vectors of n_cols prepared for weights of type t.
size_t activation_bytes(weight_type t, int64_t n_cols, int64_t n_x);
// x: [n_x][n_cols] -> qx (activation_bytes(t, n_cols, n_x) bytes): Q8_0-style blocks
// for q8_0, Q8_K-style blocks (with per-16 sums) for q4_k/q6_k, a float copy otherwise.
void quantize_activations(weight_type t, const float* x, int64_t n_cols, int64_t n_x, void* qx);
// True when quantize_activations(t, ...) is a plain float copy (float weight formats), so x
// itself may be passed to matmul_prequantized as qx.
bool activations_are_floats(weight_type t);
// matmul over activations already prepared by quantize_activations.
void matmul_prequantized(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols,
                         const void* qx, int64_t n_x, float* y, int64_t row_begin, int64_t row_end,
                         int64_t n_rows);

// Weight layouts the CPU kernels prefer to a file's (weights are repacked once, at load).
// The layout matmul runs fastest on for a [n_rows][n_cols] matrix of type t: where the AVX2
// kernels are built, the _x8 layout of Q8_0, Q4_K, Q6_K, Q5_K, IQ4_XS and Q3_K with n_rows a
// multiple of 8, and Q4_0's _x16 with n_rows a multiple of 16; otherwise t itself.
weight_type preferred_layout(weight_type t, int64_t n_rows, int64_t n_cols);
// The file type layout t is repacked from (t itself for a file type); it also names the
// activation format t takes (quantize_activations).
weight_type file_type(weight_type t);
// Bytes of a [n_rows][n_cols] matrix in layout t (rows packed, no padding).
size_t matrix_bytes(weight_type t, int64_t n_rows, int64_t n_cols);
// src: [n_rows][n_cols] of type `from`, rows packed -> dst (matrix_bytes(to, ...) bytes) in
// layout `to` (from itself: a copy; q8_0, q4_k, q6_k, q4_0, q5_k, iq4_xs, q3_k -> their _x8). Exact: no value
// changes. An _x8 matrix has row stride row_bytes(layout, n_cols) for matmul; its rows are
// not individually addressable (dequantize_row refuses them).
void repack(weight_type from, const void* src, int64_t n_rows, int64_t n_cols, weight_type to, void* dst);

// The plain scalar path of the same math (activation quantization included); for tests.
void matmul_reference(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols,
                      const float* x, int64_t n_x, float* y, int64_t row_begin, int64_t row_end,
                      int64_t n_rows);

// ---------------------------------------------------------------------------
// Vector ops (all fixed-order, so batch invariant)

// y = x / sqrt(mean(x^2) + eps) * w; y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

enum class rope_style {
  normal,  // rotate pairs (2i, 2i+1)            (llama)
  neox,    // rotate pairs (i, i + n_rot/2)      (qwen2, neox)
};
// Rotary position embedding in place. vec: [n_heads][head_dim]; the first n_rot
// (even, <= head_dim) dims of each head rotate by theta_i = pos*scale*base^(-2i/n_rot);
// scale is the linear frequency scale (1 = none).
void rope(float* vec, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos, float base,
          float scale, rope_style style = rope_style::normal);

// x = softmax(x) over n values (max-subtracted).
void softmax_inplace(float* x, int64_t n);
// SwiGLU: y = silu(gate) * up; y may alias either input.
void silu_mul(const float* gate, const float* up, float* y, int64_t n);
// y = a + b; y may alias a or b (residual: vec_add(x, r, x, n)).
void vec_add(const float* a, const float* b, float* y, int64_t n);
// y += a * x (attention value accumulation).
void vec_axpy(float a, const float* x, float* y, int64_t n);
// y *= a.
void vec_scale(float* y, float a, int64_t n);
// sum(a[i] * b[i]) in a fixed order.
float dot_f32(const float* a, const float* b, int64_t n);

// ---------------------------------------------------------------------------
// Machine measurement

// Streams `bytes` of memory (split over n_threads threads) several times with wide
// loads and returns the best observed read bandwidth in GB/s (1e9 bytes/s).
double measure_read_bandwidth_gbps(size_t bytes, int n_threads);
// The same, timed by each thread's CPU clock (the slowest thread's) instead of the
// wall clock: the bandwidth a thread sees while it runs, robust on a shared host.
double measure_read_bandwidth_cpu_gbps(size_t bytes, int n_threads);
// Seconds of CPU time consumed by the calling thread.
double thread_cpu_seconds();

// Anonymous zeroed memory of `bytes`, 2 MiB-aligned and advised for transparent huge pages
// (4 KiB pages where THP is off); nullptr on failure. Release with free_huge(p, bytes).
// Decode weights and the read-bandwidth probe both use it (see huge_pages.cpp).
void* alloc_huge(size_t bytes);
void free_huge(void* p, size_t bytes);
// Whether transparent huge pages are enabled at all (not "never").
bool huge_pages_enabled();

}  // namespace agentq::kernels
