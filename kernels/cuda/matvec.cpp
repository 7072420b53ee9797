// Reference dequantisation (ggml block layouts) and matrix-vector product for
// matvec.cu / gemm.cu; plain loops written from the ggml format, not from the kernels.
#include <cstring>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// 6-bit scale and min j (0..7) of a Q4_K block's packed scales[12].
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {  // 34 B -> 32
  const float d = fp16_to_fp32(load_u16(b));
  for (int j = 0; j < 32; ++j) y[j] = d * float(static_cast<int8_t>(b[2 + j]));
}

void dequant_q4_k(const uint8_t* b, float* y) {  // 144 B -> 256
  const float d = fp16_to_fp32(load_u16(b));
  const float dmin = fp16_to_fp32(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {  // 210 B -> 256
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_to_fp32(load_u16(b + 208));
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is + 0]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

}  // namespace

void dequantize(weight_type t, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case weight_type::f32: std::memcpy(dst, p, size_t(n) * 4); break;
    case weight_type::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(p + 2 * i));
      break;
    case weight_type::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
      break;
    case weight_type::q8_0:
      for (int64_t i = 0; i < n / 32; ++i) dequant_q8_0(p + 34 * i, dst + 32 * i);
      break;
    case weight_type::q4_k:
      for (int64_t i = 0; i < n / 256; ++i) dequant_q4_k(p + 144 * i, dst + 256 * i);
      break;
    case weight_type::q6_k:
      for (int64_t i = 0; i < n / 256; ++i) dequant_q6_k(p + 210 * i, dst + 256 * i);
      break;
    default:
      // NOTE: the other formats' reference is the CPU library's dequantizer, itself checked bit
      // for bit against llama.cpp's (test_kernels_formats).
      agentq::kernels::dequantize_row(agentq::kernels::weight_type(uint32_t(t)), p, dst, n);
      break;
  }
}

void matvec(weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y) {
  const size_t rb = cuda::row_bytes(type, n_in);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    dequantize(type, static_cast<const uint8_t*>(w) + size_t(o) * rb, row.data(), n_in);
    for (int32_t i = 0; i < n_x; ++i) {
      const float* xi = x + int64_t(i) * n_in;
      double acc = 0;
      for (int64_t k = 0; k < n_in; ++k) acc += double(row[size_t(k)]) * double(xi[k]);
      y[int64_t(i) * n_out + o] = float(acc);
    }
  }
}

}  // namespace agentq::kernels::ref
