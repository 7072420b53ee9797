// The prefill GEMM's weight tiles: rows of a block-format matrix dequantised to fp16 with the
// matvec's lane decoders (matvec_quants.cuh): each lane decodes its share of a block once and
// writes ggml's values rounded to fp16, 4 at a time. gemm.cu multiplies the tiles with cuBLAS.
#include <algorithm>

#include "common.cuh"
#include "matvec_quants.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// dst[r][i] = fp16(element i of row row0 + r), r < n_rows: blocks numbered row by row, a warp
// takes 32 / lanes consecutive blocks a step (a whole warp per Q6_K block).
template <weight_type T>
__global__ void __launch_bounds__(kThreads)
    dequantize_lanes_kernel(const uint8_t* __restrict__ w, size_t rb, int64_t row0, int64_t n_rows, int64_t n_in,
                            __half* __restrict__ dst) {
  using F = detail::lane_fmt<T>;
  constexpr int per_warp = 32 / F::lanes;
  const int64_t row_blocks = n_in / F::elems, n_blocks = n_rows * row_blocks;
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t n_warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t i = warp * per_warp + lane / F::lanes; i < n_blocks; i += n_warps * per_warp) {
    const int64_t r = i / row_blocks, b = i % row_blocks;
    __half* out = dst + r * n_in + b * F::elems;
    // NOTE: n_in is a multiple of 32 and groups start at multiples of 4: 8-byte aligned stores.
    detail::dequant_lane<T>(w + size_t(row0 + r) * rb + size_t(b) * F::bytes, lane % F::lanes,
                            [out](int e, const float* v) {
                              __half2* p = reinterpret_cast<__half2*>(out + e);
                              p[0] = __floats2half2_rn(v[0], v[1]);
                              p[1] = __floats2half2_rn(v[2], v[3]);
                            });
  }
}

// The float types (not GEMM tiles: gemm() reads them directly), one element per thread.
__global__ void dequantize_elems_kernel(weight_type type, const uint8_t* __restrict__ w, size_t rb, int64_t row0,
                                        int64_t n_in, __half* __restrict__ dst) {
  const int64_t r = blockIdx.y;
  const uint8_t* row = w + size_t(row0 + r) * rb;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_in; i += int64_t(gridDim.x) * blockDim.x)
    dst[r * n_in + i] = __float2half_rn(detail::dequant_elem(type, row, i));
}

template <weight_type T>
void launch_lanes(const uint8_t* w, int64_t row0, int64_t n_rows, int64_t n_in, __half* dst, cudaStream_t s) {
  using F = detail::lane_fmt<T>;
  const int64_t threads = n_rows * (n_in / F::elems) * F::lanes;
  const unsigned grid = unsigned(std::min<int64_t>(detail::ceil_div(threads, kThreads), 8192));
  dequantize_lanes_kernel<T><<<grid, kThreads, 0, s>>>(w, row_bytes(T, n_in), row0, n_rows, n_in, dst);
}

}  // namespace

void dequantize_f16(weight_type type, const void* w, int64_t row0, int64_t n_rows, int64_t n_in, void* dst_f16,
                    stream_t s) {
  if (n_rows <= 0) return;
  AGENTQ_CUDA_REQUIRE(n_in % block_elems(type) == 0);
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* dst = static_cast<__half*>(dst_f16);
  const cudaStream_t st = detail::as_stream(s);
  switch (type) {
#define AGENTQ_DQ(T)                                                     \
  case weight_type::T:                                                   \
    static_assert(detail::has_lane_decoder<weight_type::T>);             \
    launch_lanes<weight_type::T>(wb, row0, n_rows, n_in, dst, st);       \
    break;
    AGENTQ_DQ(q4_0) AGENTQ_DQ(q4_1) AGENTQ_DQ(q5_0) AGENTQ_DQ(q5_1) AGENTQ_DQ(q8_0) AGENTQ_DQ(q2_k) AGENTQ_DQ(q3_k)
    AGENTQ_DQ(q4_k) AGENTQ_DQ(q5_k) AGENTQ_DQ(q6_k) AGENTQ_DQ(iq4_nl) AGENTQ_DQ(iq4_xs) AGENTQ_DQ(mxfp4)
#undef AGENTQ_DQ
    case weight_type::f32:
    case weight_type::f16:
    case weight_type::bf16: {
      // NOTE: at most 65535 rows a call here (grid y); gemm() never tiles the float types.
      AGENTQ_CUDA_REQUIRE(n_rows <= 65535);
      const dim3 grid(std::min<unsigned>(detail::ceil_div(n_in, kThreads), 64u), unsigned(n_rows));
      dequantize_elems_kernel<<<grid, kThreads, 0, st>>>(type, wb, row_bytes(type, n_in), row0, n_in, dst);
      break;
    }
  }
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
