// Prefill GEMM through cuBLAS (cublasGemmEx, fp16/bf16 in, fp32 accumulate and out).
// Block-format weights are dequantised to fp16 in row tiles first (dequantize.cu: the matvec's
// per-format lane decoders); activations are converted to the weight's 16-bit type.
// cuBLAS is opened at the first handle (cublas_api below), not linked: a linked libcublas pulls in
// libcublasLt, whose static initializers ran in every process of a CUDA build at start, ~0.3 s and
// ~200 MB of RSS on a host that never touches a GPU (agentqd on a CPU worker, each test's start).
#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>

#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int64_t kTileElems = int64_t(1) << 24;  // fp16 elements per dequantised weight tile (32 MiB)

// The cuBLAS entry points this file calls, resolved from the library of the major version built
// against. NOTE: the exported names: cublasCreate & co. are macros for their _v2 symbols, and
// cublasGemmEx is also an inline overload taking a cudaDataType compute type (not exported).
struct cublas_api {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  const char* (*status_name)(cublasStatus_t) = nullptr;
  std::string error;  // why it is not there (empty: every entry point resolved)
};

// Opened once (thread-safe static); never closed (its handles may live to exit).
const cublas_api& cublas() {
  static const cublas_api api = [] {
    cublas_api a;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    // NOTE: the soname first (the executable's RUNPATH, LD_LIBRARY_PATH, ld.so.conf), then the
    // toolkit's directory this build was configured with.
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef AGENTQ_CUDA_LIB_DIR
    if (!lib) lib = dlopen((std::string(AGENTQ_CUDA_LIB_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!lib) {
      const char* e = dlerror();
      a.error = "cannot open " + soname + ": " + (e ? e : "unknown error");
      return a;
    }
    auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.error.empty()) a.error = soname + " has no " + name;
    };
    resolve(a.create, "cublasCreate_v2");
    resolve(a.destroy, "cublasDestroy_v2");
    resolve(a.set_stream, "cublasSetStream_v2");
    resolve(a.gemm_ex, "cublasGemmEx");
    resolve(a.status_name, "cublasGetStatusName");
    return a;
  }();
  return api;
}

bool cublas_ok(cublasStatus_t st, const char* expr, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "agentq: cuBLAS error %s at %s:%d: %s\n", cublas().status_name(st), file, line, expr);
  if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) set_cuda_failed(expr);
  return false;
}
#define AGENTQ_CUBLAS_CHECK(expr) cublas_ok((expr), #expr, __FILE__, __LINE__)

int64_t tile_rows(int64_t n_out, int64_t n_in) { return std::max<int64_t>(1, std::min(n_out, kTileElems / n_in)); }

__global__ void convert_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}
__global__ void convert_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

unsigned grid_1d(int64_t n) { return std::min<unsigned>(detail::ceil_div(n, 256), 65535u); }

}  // namespace

void convert_f32_to_f16(const float* x, void* dst, int64_t n, stream_t s) {
  if (n <= 0) return;
  convert_f16_kernel<<<grid_1d(n), 256, 0, detail::as_stream(s)>>>(x, static_cast<__half*>(dst), n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void convert_f32_to_bf16(const float* x, void* dst, int64_t n, stream_t s) {
  if (n <= 0) return;
  convert_bf16_kernel<<<grid_1d(n), 256, 0, detail::as_stream(s)>>>(x, static_cast<__nv_bfloat16*>(dst), n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

std::string cublas_load_error() { return cublas().error; }

void* cublas_create(stream_t s) {
  const auto& api = cublas();
  if (!api.error.empty()) {
    std::fprintf(stderr, "agentq: cuBLAS: %s\n", api.error.c_str());
    return nullptr;
  }
  cublasHandle_t h = nullptr;
  if (!AGENTQ_CUBLAS_CHECK(api.create(&h))) return nullptr;
  if (!AGENTQ_CUBLAS_CHECK(api.set_stream(h, detail::as_stream(s)))) {
    api.destroy(h);
    return nullptr;
  }
  return h;
}

void cublas_destroy(void* handle) {
  if (handle) AGENTQ_CUBLAS_CHECK(cublas().destroy(static_cast<cublasHandle_t>(handle)));
}

size_t gemm_scratch_bytes(weight_type type, int64_t n_out, int64_t n_in, int32_t n_x) {
  if (type == weight_type::f32) return 0;
  size_t bytes = (size_t(n_x) * size_t(n_in) * 2 + 255) & ~size_t(255);  // x in 16 bits
  if (type != weight_type::f16 && type != weight_type::bf16) bytes += size_t(tile_rows(n_out, n_in) * n_in) * 2;
  return bytes;
}

bool gemm(void* cublas, weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x,
          float* y, void* scratch, stream_t s) {
  if (n_out <= 0 || n_x <= 0) return true;
  auto h = static_cast<cublasHandle_t>(cublas);
  // NOTE: qualified: the parameter `cublas` hides the function. A handle exists, so it resolved.
  const auto& api = agentq::kernels::cuda::cublas();
  if (!AGENTQ_CUBLAS_CHECK(api.set_stream(h, detail::as_stream(s)))) return false;
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y[n_x][n_out] = x[n_x][n_in] * W[n_out][n_in]^T is column-major
  // C[n_out][n_x] = op_T(A: [n_in][n_out]) * B[n_in][n_x].
  auto gemm_ex = [&](const void* a, cudaDataType at, const void* b, cudaDataType bt, int64_t m, float* c) {
    return AGENTQ_CUBLAS_CHECK(api.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), n_x, int(n_in), &alpha, a, at,
                                            int(n_in), b, bt, int(n_in), &beta, c, CUDA_R_32F, int(n_out),
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  if (type == weight_type::f32) return gemm_ex(w, CUDA_R_32F, x, CUDA_R_32F, n_out, y);
  auto* x16 = static_cast<uint8_t*>(scratch);
  if (type == weight_type::bf16) {
    convert_f32_to_bf16(x, x16, int64_t(n_x) * n_in, s);
    return gemm_ex(w, CUDA_R_16BF, x16, CUDA_R_16BF, n_out, y);
  }
  convert_f32_to_f16(x, x16, int64_t(n_x) * n_in, s);
  if (type == weight_type::f16) return gemm_ex(w, CUDA_R_16F, x16, CUDA_R_16F, n_out, y);
  void* tile = x16 + ((size_t(n_x) * size_t(n_in) * 2 + 255) & ~size_t(255));
  const int64_t rows = tile_rows(n_out, n_in);
  for (int64_t r0 = 0; r0 < n_out; r0 += rows) {
    const int64_t m = std::min(rows, n_out - r0);
    dequantize_f16(type, w, r0, m, n_in, tile, s);
    if (!gemm_ex(tile, CUDA_R_16F, x16, CUDA_R_16F, m, y + r0)) return false;
  }
  return true;
}

}  // namespace agentq::kernels::cuda
