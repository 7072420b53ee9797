// Paged KV cache on the device: allocation, writing new tokens' K/V through the
// block tables, and the spill tier's async block copies on kv_copy_stream().
#include <mutex>

#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void kv_write_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                const int32_t* __restrict__ pos, const int32_t* __restrict__ tok_seq,
                                const int32_t* __restrict__ block_tables, int32_t max_blocks, int32_t row,
                                int32_t block_size, float* k_cache, float* v_cache) {
  const int32_t t = blockIdx.x;
  const int32_t p = pos[t];
  const int32_t block = block_tables[int64_t(tok_seq[t]) * max_blocks + p / block_size];
  const int64_t dst = (int64_t(block) * block_size + p % block_size) * row;
  for (int32_t i = threadIdx.x; i < row; i += blockDim.x) {
    k_cache[dst + i] = k_new[int64_t(t) * row + i];
    v_cache[dst + i] = v_new[int64_t(t) * row + i];
  }
}

}  // namespace

kv_device_cache kv_device_alloc(int32_t n_layer, int32_t n_blocks, int64_t block_floats) {
  kv_device_cache kv;
  const size_t bytes = size_t(n_layer) * size_t(n_blocks) * size_t(block_floats) * sizeof(float);
  kv.k = device_buffer(bytes);
  kv.v = device_buffer(bytes);
  kv.n_layer = n_layer;
  kv.n_blocks = n_blocks;
  kv.block_floats = block_floats;
  if (kv.k.ok() && kv.v.ok()) {
    kv.k.zero();
    kv.v.zero();
  }
  return kv;
}

stream_t kv_copy_stream() {
  // NOTE: created once and never destroyed: it lives as long as the CUDA context.
  static std::once_flag once;
  static cudaStream_t stream = nullptr;
  std::call_once(once, [] {
    int lowest = 0, greatest = 0;
    AGENTQ_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &greatest));
    AGENTQ_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, lowest));
  });
  return stream;
}

bool kv_spill_blocks(const kv_device_cache& kv, const int32_t* src_blocks, const int32_t* dst_slots, int32_t n,
                     float* host_slots) {
  const cudaStream_t s = detail::as_stream(kv_copy_stream());
  const size_t bytes = size_t(kv.block_floats) * sizeof(float);
  bool ok = true;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t layer = 0; layer < kv.n_layer; ++layer) {
      float* host = host_slots + (int64_t(dst_slots[i]) * kv.n_layer + layer) * 2 * kv.block_floats;
      const int64_t off = int64_t(src_blocks[i]) * kv.block_floats;
      ok = ok && AGENTQ_CUDA_CHECK(cudaMemcpyAsync(host, kv.k_layer(layer) + off, bytes, cudaMemcpyDeviceToHost, s));
      ok = ok && AGENTQ_CUDA_CHECK(
                     cudaMemcpyAsync(host + kv.block_floats, kv.v_layer(layer) + off, bytes, cudaMemcpyDeviceToHost, s));
    }
  }
  return ok;
}

bool kv_restore_blocks(const kv_device_cache& kv, const int32_t* src_slots, const int32_t* dst_blocks, int32_t n,
                       const float* host_slots) {
  const cudaStream_t s = detail::as_stream(kv_copy_stream());
  const size_t bytes = size_t(kv.block_floats) * sizeof(float);
  bool ok = true;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t layer = 0; layer < kv.n_layer; ++layer) {
      const float* host = host_slots + (int64_t(src_slots[i]) * kv.n_layer + layer) * 2 * kv.block_floats;
      const int64_t off = int64_t(dst_blocks[i]) * kv.block_floats;
      ok = ok && AGENTQ_CUDA_CHECK(cudaMemcpyAsync(kv.k_layer(layer) + off, host, bytes, cudaMemcpyHostToDevice, s));
      ok = ok && AGENTQ_CUDA_CHECK(
                     cudaMemcpyAsync(kv.v_layer(layer) + off, host + kv.block_floats, bytes, cudaMemcpyHostToDevice, s));
    }
  }
  return ok;
}

bool kv_copy_block_rows(const kv_device_cache& kv, int32_t src, int32_t dst, int64_t n_floats, stream_t s) {
  const cudaStream_t st = detail::as_stream(s);
  const size_t bytes = size_t(n_floats) * sizeof(float);
  const int64_t src_off = int64_t(src) * kv.block_floats, dst_off = int64_t(dst) * kv.block_floats;
  bool ok = true;
  for (int32_t layer = 0; layer < kv.n_layer; ++layer) {
    ok = ok && AGENTQ_CUDA_CHECK(cudaMemcpyAsync(kv.k_layer(layer) + dst_off, kv.k_layer(layer) + src_off, bytes,
                                                 cudaMemcpyDeviceToDevice, st));
    ok = ok && AGENTQ_CUDA_CHECK(cudaMemcpyAsync(kv.v_layer(layer) + dst_off, kv.v_layer(layer) + src_off, bytes,
                                                 cudaMemcpyDeviceToDevice, st));
  }
  return ok;
}

void kv_write(const float* k_new, const float* v_new, const int32_t* pos, const int32_t* tok_seq,
              const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t row, int32_t block_size,
              float* k_cache, float* v_cache, stream_t s) {
  if (n_tokens <= 0) return;
  kv_write_kernel<<<n_tokens, 256, 0, detail::as_stream(s)>>>(k_new, v_new, pos, tok_seq, block_tables, max_blocks,
                                                               row, block_size, k_cache, v_cache);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
