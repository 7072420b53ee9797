// agentq CUDA kernels — host-side launchers for the decode/prefill ops, their plain
// C++ references (namespace ref, always built; the tests compare against them) and
// the small runtime around them (error flag, device buffers, streams, graphs).
// NOTE: no CUDA header is needed to include this; streams travel as void*
// (cudaStream_t) and errors as int (cudaError_t). Launchers exist only in builds
// with AGENTQ_HAVE_CUDA; the references and cuda_failed() exist in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// Helpers shared by the kernels and their host references.
#if defined(__CUDACC__)
#define AGENTQ_CUDA_HD __host__ __device__
#else
#define AGENTQ_CUDA_HD
#endif

namespace agentq::kernels::cuda {

// ---------------------------------------------------------------------------
// Weight types (ggml ids) and their block geometry.
// ---------------------------------------------------------------------------
// NOTE: every type has its own matvec row dot and, for the block formats, a lane decoder that
// writes the GEMM's fp16 tiles (kernels/cuda/matvec_quants.cuh); only the embedding gather
// dequantises element by element (not a hot path).
enum class weight_type : int32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12,
  q5_k = 13, q6_k = 14, iq4_nl = 20, iq4_xs = 23, bf16 = 30, mxfp4 = 39
};

inline int32_t block_elems(weight_type t) {  // elements per block
  switch (t) {
    case weight_type::q8_0: case weight_type::q4_0: case weight_type::q4_1: case weight_type::q5_0:
    case weight_type::q5_1: case weight_type::iq4_nl: case weight_type::mxfp4: return 32;
    case weight_type::q4_k: case weight_type::q6_k: case weight_type::q2_k: case weight_type::q3_k:
    case weight_type::q5_k: case weight_type::iq4_xs: return 256;
    default: return 1;
  }
}
inline int32_t block_bytes(weight_type t) {  // bytes per block
  switch (t) {
    case weight_type::f32: return 4;
    case weight_type::f16:
    case weight_type::bf16: return 2;
    case weight_type::q8_0: return 34;   // fp16 d, int8 qs[32]
    case weight_type::q4_k: return 144;  // fp16 d, fp16 dmin, u8 scales[12], u8 qs[128]
    case weight_type::q6_k: return 210;  // u8 ql[128], u8 qh[64], i8 scales[16], fp16 d
    case weight_type::q4_0: return 18;
    case weight_type::q4_1: return 20;
    case weight_type::q5_0: return 22;
    case weight_type::q5_1: return 24;
    case weight_type::iq4_nl: return 18;
    case weight_type::mxfp4: return 17;
    case weight_type::q2_k: return 84;
    case weight_type::q3_k: return 110;
    case weight_type::q5_k: return 176;
    case weight_type::iq4_xs: return 136;
  }
  return 0;
}
// Whether the CUDA kernels take ggml type id `id` (the same set as the CPU's, kernels.h).
inline bool supported(int32_t id) {
  switch (id) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 10: case 11: case 12: case 13: case 14:
    case 20: case 23: case 30: case 39:
      return true;
    default: return false;
  }
}
// Bytes of one row of n elements (n a multiple of block_elems(t)).
inline size_t row_bytes(weight_type t, int64_t n) { return size_t(n / block_elems(t)) * size_t(block_bytes(t)); }

// ---------------------------------------------------------------------------
// Errors. Every CUDA runtime call goes through AGENTQ_CUDA_CHECK; a sticky
// device error (illegal address, launch failure, ECC...) sets a process-wide
// failed flag that the engine's readiness reports. Defined in every build
// (false when CUDA is off).
// ---------------------------------------------------------------------------
bool cuda_failed();
const char* cuda_failed_reason();  // "" until the first sticky error
// Record a sticky failure (called by check_result; exposed for cuBLAS errors and tests).
void set_cuda_failed(const char* reason);

// Returns true when code == 0 (cudaSuccess); otherwise prints expr, the error
// name, file and line to stderr, and sets the failed flag for sticky errors.
bool check_result(int code, const char* expr, const char* file, int line);

// MoE router gating (moe_topk): Qwen3-MoE's softmax over every expert with the top k's
// probabilities renormalised, or gpt-oss's softmax over the k largest logits alone.
enum class moe_gating : int32_t { softmax_norm = 0, topk_softmax = 1 };

}  // namespace agentq::kernels::cuda

#define AGENTQ_CUDA_CHECK(expr) \
  ::agentq::kernels::cuda::check_result(static_cast<int>(expr), #expr, __FILE__, __LINE__)

namespace agentq::kernels::cuda {

using stream_t = void*;  // cudaStream_t; nullptr = the legacy default stream

// ---------------------------------------------------------------------------
// Runtime: devices, memory, streams, events. (CUDA builds only.)
// ---------------------------------------------------------------------------
int device_count();              // 0 when no driver/device (never sets the failed flag)
// Make device `ordinal` current for the calling thread (CUDA's current device is per
// thread: the engine thread calls this before each batch). false on error.
bool set_device(int ordinal);
const char* device_name();       // of the current device
size_t device_l2_bytes();

// Owned device memory. Empty (nullptr) after a failed allocation; check ok().
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(size_t bytes);
  ~device_buffer();
  device_buffer(device_buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  bool ok() const { return ptr_ != nullptr; }
  size_t bytes() const { return bytes_; }
  void* data() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

  // Synchronous (complete on return, visible to every stream) copies of n bytes at
  // byte offset off, and zero-fill; false on error.
  bool upload(const void* src, size_t n, size_t off = 0);
  bool download(void* dst, size_t n, size_t off = 0) const;
  bool zero();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (for async copies of spilled KV blocks).
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(size_t bytes);
  ~pinned_buffer();
  pinned_buffer(pinned_buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  pinned_buffer& operator=(pinned_buffer&& o) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  bool ok() const { return ptr_ != nullptr; }
  size_t bytes() const { return bytes_; }
  void* data() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

stream_t stream_create();  // non-blocking stream; nullptr on failure
void stream_destroy(stream_t s);
bool stream_synchronize(stream_t s);
bool device_synchronize();
bool memcpy_h2d_async(void* dst, const void* src, size_t n, stream_t s);
bool memcpy_d2h_async(void* dst, const void* src, size_t n, stream_t s);

// Events: for ordering between streams and for timing.
void* event_create();  // cudaEvent_t; nullptr on failure
void event_destroy(void* e);
bool event_record(void* e, stream_t s);
bool event_synchronize(void* e);
bool event_query(void* e);                       // true when the work before it is done
bool stream_wait_event(stream_t s, void* e);
float event_elapsed_ms(void* start, void* stop);  // -1 on error

// ---------------------------------------------------------------------------
// Paged KV cache in device memory, and the spill tier's block copies.
// Layout per layer as kv_store: [n_blocks][block_size][n_head_kv*head_dim] fp32,
// K and V in separate arrays: k_base + (layer*n_blocks + block)*block_floats.

// Windowed KV (engine/kv/page_table.h): the cache is one pool of pages, each one layer's block of
// K (and V), and a layer's block b lives in page map[b * n_layer + layer] (-1: none, a windowed
// layer's block outside every window). map nullptr: block b of a layer is page b of that layer's
// array (every layer whole). The block tables stay the sequences' block ids, shared by all layers.
struct kv_page_map {
  const int32_t* map = nullptr;  // device [n_block_ids][n_layer], or nullptr
  int32_t n_layer = 0;
  int32_t layer = 0;
};
AGENTQ_CUDA_HD inline int32_t kv_page(const kv_page_map& pm, int32_t block) {
  return pm.map ? pm.map[int64_t(block) * pm.n_layer + pm.layer] : block;
}

// ---------------------------------------------------------------------------
struct kv_device_cache {
  device_buffer k;  // [n_layer][n_blocks][block_floats]
  device_buffer v;  // same
  int32_t n_layer = 0;
  int32_t n_blocks = 0;
  int64_t block_floats = 0;  // block_size * n_head_kv * head_dim
  float* k_layer(int32_t layer) const { return k.as<float>() + int64_t(layer) * n_blocks * block_floats; }
  float* v_layer(int32_t layer) const { return v.as<float>() + int64_t(layer) * n_blocks * block_floats; }
};
// Allocates and zeroes; ok() false on either buffer when out of memory.
kv_device_cache kv_device_alloc(int32_t n_layer, int32_t n_blocks, int64_t block_floats);

// The dedicated low-priority stream for spill/restore copies (created on first use).
stream_t kv_copy_stream();

// Spill: for i < n, every layer's K and V of device block src_blocks[i] -> host
// slot dst_slots[i] of a host array laid out [n_slots][n_layer][2][block_floats]
// (pinned memory for real asynchrony). Enqueued on kv_copy_stream(); record an
// event after it to know when the host copy is complete.
bool kv_spill_blocks(const kv_device_cache& kv, const int32_t* src_blocks, const int32_t* dst_slots, int32_t n,
                     float* host_slots);
// Restore: host slot src_slots[i] -> device block dst_blocks[i], on kv_copy_stream().
bool kv_restore_blocks(const kv_device_cache& kv, const int32_t* src_slots, const int32_t* dst_blocks, int32_t n,
                       const float* host_slots);

// Copy-on-write inside the cache: the first n_floats floats of block src -> block dst,
// K and V of every layer, device to device on s (ordered with the forward pass).
bool kv_copy_block_rows(const kv_device_cache& kv, int32_t src, int32_t dst, int64_t n_floats, stream_t s);

// Writes n_tokens new K/V rows of one layer into the paged cache.
//   k_new, v_new: [n_tokens][row]   pos: [n_tokens] absolute positions
//   block_table: [n_tokens'... ] physical block of position p at block_table[p / block_size]
//   (per token: tok_seq[t] selects the block table row block_tables + tok_seq[t]*max_blocks)
void kv_write(const float* k_new, const float* v_new, const int32_t* pos, const int32_t* tok_seq,
              const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t row, int32_t block_size,
              float* k_cache, float* v_cache, stream_t s);

// ---------------------------------------------------------------------------
// Ops. All pointers are device pointers; every launcher enqueues on s and
// checks the launch (a failure lands in cuda_failed()).
// ---------------------------------------------------------------------------

// out[i][:] = dequant(table row ids[i]).  table: [n_vocab][row_bytes(type, n_embd)]  out: [n_ids][n_embd]
void embedding(weight_type type, const void* table, const int32_t* ids, int32_t n_ids, int32_t n_embd, float* out,
               stream_t s);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w.  x, y: [n_rows][n]  w: [n]  (y may alias x)
void rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t n, float eps, stream_t s);

// Rotary embedding in place on the first n_rot dims of each head.
//   x: [n_tokens][n_head][head_dim]  pos: [n_tokens]  freq_factors: [n_rot/2] or nullptr
// neox: pairs (i, i + n_rot/2); else adjacent pairs (2i, 2i+1).
// theta_i = pos * scale * base^(-2i/n_rot) / freq_factors[i] (Llama 3.1 rope_freqs), in double.
void rope(float* x, const int32_t* pos, int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
          float base, float scale, bool neox, const float* freq_factors, stream_t s);

// rope(q), rope(k) and kv_write in one launch (decode's per-layer form; the same bits).
//   q: [n_tokens][n_head][head_dim]  k, v: [n_tokens][n_head_kv * head_dim] (q, k roped in place)
void rope_kv_write(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                   const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                   int32_t n_head_kv, int32_t head_dim, int32_t n_rot, float base, float scale, bool neox,
                   const float* freq_factors, int32_t block_size, float* k_cache, float* v_cache, stream_t s);
// rope_kv_write from a table of angles, as the CPU forward pass (transformer.cpp) rotates: pair i
// turns by theta = float(pos) * inv_freq[i] (float product), cos/sin of it times mscale (YaRN's and
// LongRoPE's magnitude), (a, b) -> (a c - b s, a s + b c) as fmaf(a, c, -(b s)), fmaf(a, s, b c).
// Every family's RoPE is such a table (layer_stack::rope_inv_freq: plain, rope_freqs, LongRoPE,
// YaRN, a local base). inv_freq: [n_rot/2] (device); nullptr: no rotation (a NoPE layer), only the write.
void rope_kv_write_table(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                         const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                         int32_t n_head_kv, int32_t head_dim, int32_t n_rot, bool neox, const float* inv_freq,
                         float mscale, int32_t block_size, float* k_cache, float* v_cache, stream_t s,
                         const kv_page_map& pages = {});

// x[i] += y[i], i < n.
void add(float* x, const float* y, int64_t n, stream_t s);
// x[r][i] += b[i].  x: [n_rows][n]  b: [n]  (biases)
void add_rows(float* x, const float* b, int32_t n_rows, int32_t n, stream_t s);
// dst[i] = src[rows[i]].  src: [*][n]  rows: [n_rows]  dst: [n_rows][n]
void gather_rows(const float* src, const int32_t* rows, int32_t n_rows, int32_t n, float* dst, stream_t s);

// out[i] = silu(gate[i]) * up[i], i < n.  (out may alias gate or up)
void swiglu(const float* gate, const float* up, float* out, int64_t n, stream_t s);

// Ops of the families beyond llama (families.cu; references in families.cpp).
// out[i] = gelu_tanh(gate[i]) * up[i], gate rounded to F16 and the GELU rounded to F16 as ggml's CPU
// backend (Gemma's FFN); exact beyond |gate| >= 10. out may alias gate or up.
void gelu_mul(const float* gate, const float* up, float* out, int64_t n, stream_t s);
// x[i] *= factor (Gemma's embedding scale sqrt(n_embd)).
void scale(float* x, float factor, int64_t n, stream_t s);
// x[i] = cap * tanh(x[i] / cap), cap > 0 (Gemma 2's final-logit soft-capping).
void softcap(float* x, float cap, int64_t n, stream_t s);
// Router top-k per row: logits [n_rows][n_expert] -> ids, weights [n_rows][k] (ids by falling
// logit, ties: lower id), weights as the gating says (engine/model/moe.cpp's rule).
void moe_topk(const float* logits, int32_t n_rows, int32_t n_expert, int32_t k, moe_gating gating, int32_t* ids,
              float* weights, stream_t s);
// GPT-OSS's clamped SwiGLU: out = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, stream_t s);
// Per-expert biases: x[r][i] += b[ids[r]][i].  x: [n_rows][n]  b: [n_expert][n]  ids: [n_rows]
void add_rows_by_id(float* x, const float* b, const int32_t* ids, int32_t n_rows, int32_t n, stream_t s);
// The experts' outputs weighed and summed in rank order, each product rounded before it is added
// (ggml's order, engine/model/moe.cpp): out[i] = w[i][0] y[i][0] + w[i][1] y[i][1] + ...
//   y: [n_tok][k][n]  w: [n_tok][k]  out: [n_tok][n]
void moe_combine(const float* y, const float* w, int32_t n_tok, int32_t k, int32_t n, float* out, stream_t s);

// What the families beyond llama add to attention (engine/model/attention.h's attention_args):
// a sliding window, score soft-capping and a per-head sink logit. The defaults change nothing
// (the kernels then take the plain path's arithmetic).
struct attention_options {
  int32_t window = 0;            // key p is visible from query position t iff t - p < window; 0: all of 0..t
  float softcap = 0.0f;          // scores -> softcap * tanh(scores / softcap) before the softmax; 0: none
  const float* sinks = nullptr;  // [n_head] one more logit per head in the softmax's denominator, no value row
  kv_page_map pages{};           // windowed KV: block -> this layer's page (k/v_cache are the page pool)
};

// Decode's partitions with a window: a query at len - 1 sees keys from len - window on, so only
// the partitions from attention_first_part(len, window) on hold anything, at most
// attention_window_parts(window, max_parts) of them. The kernel's grid covers those only (its z
// index counts from the sequence's first visible partition), so a windowed layer's decode work
// is bounded by the window, not the history. The partitions keep their absolute boundaries
// (multiples of attention_partition), so the combine's order, and the bits, are the full grid's.
AGENTQ_CUDA_HD inline int32_t attention_first_part(int32_t len, int32_t window, int32_t partition) {
  return window > 0 && len > window ? (len - window) / partition : 0;
}
AGENTQ_CUDA_HD inline int32_t attention_window_parts(int32_t window, int32_t max_parts, int32_t partition) {
  if (window <= 0) return max_parts;
  const int32_t n = (window + partition - 1) / partition + 1;  // a window straddles one more boundary
  return n < max_parts ? n : max_parts;
}

// Paged attention, decode: one query token per sequence, attending positions [0, seq_lens[i]).
//   q, out:       [n_seqs][n_head][head_dim]
//   k/v_cache:    one layer, [n_blocks][block_size][n_head_kv*head_dim]
//   block_tables: [n_seqs][max_blocks]
//   workspace:    attention_decode_workspace_floats(...) floats
// NOTE: contexts are split in fixed partitions of attention_partition tokens whatever
// the batch, and partials are combined in partition order, so a sequence's output
// does not depend on its batch-mates (batch invariance) and runs are bitwise repeatable.
// 256: a batch-1 step at 4096 tokens of context spreads over 16 partitions x heads blocks.
constexpr int32_t attention_partition = 256;
constexpr int32_t attention_max_head_dim = 256;
size_t attention_decode_workspace_floats(int32_t n_seqs, int32_t n_head, int32_t head_dim, int32_t max_seq_len);
void attention_decode(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                      int32_t max_blocks, const int32_t* seq_lens, int32_t n_seqs, int32_t max_seq_len,
                      int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale,
                      float* workspace, float* out, stream_t s, const attention_options& opt = {});

// Paged attention, prefill: causal, GQA, tiled (flash-attention style, fp32).
// Sequence i owns query rows [q_start[i], q_start[i+1]) at positions n_past[i] + j;
// their K/V must already be in the cache (kv_write). Attends positions [0, n_past[i] + j].
//   q, out: [q_start[n_seqs]][n_head][head_dim]   q_start: [n_seqs+1]   n_past: [n_seqs]
//   max_q: the largest q_start[i+1]-q_start[i] (grid size)
void attention_prefill(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                       int32_t max_blocks, const int32_t* q_start, const int32_t* n_past, int32_t n_seqs,
                       int32_t max_q, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size,
                       float scale, float* out, stream_t s, const attention_options& opt = {});

// Dequantising matrix-vector products: y[i][o] = dot(W row o, x[i]), fp32 accumulate.
//   w: [n_out][row_bytes(type, n_in)]  x: [n_x][n_in]  y: [n_x][n_out]
// n_in must be a multiple of block_elems(type) (and of 8 for f16/bf16).
// NOTE: each dot product runs in the same fixed order for any n_x (batch invariance).
void matvec(weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y,
            stream_t s);
// Decode's fused forms of matvec (fewer launches per layer; the same dot products, so the
// same bits as matvec followed by the separate op):
//   matvec_multi: up to three matrices of one type and n_in (Q, K and V) in one launch, each
//     writing its own y [n_x][n_out]; accumulate: y += W x (the residual add).
//   matvec_swiglu: y[i][o] = silu(dot(gate row o, x[i])) * dot(up row o, x[i]), as swiglu().
struct matvec_segment {
  const void* w;
  float* y;
  int64_t n_out;
};
void matvec_multi(weight_type type, const matvec_segment* segs, int32_t n_segs, int64_t n_in, const float* x,
                  int32_t n_x, bool accumulate, stream_t s);
void matvec_swiglu(weight_type type, const void* gate, const void* up, int64_t n_out, int64_t n_in, const float* x,
                   int32_t n_x, float* y, stream_t s);
// Mixture-of-experts rows: for r < n_rows, y[r] = W_{ids[r]} x[r / x_div], W_e the e-th matrix
// [n_out][n_in] of a stack [n_expert][n_out][n_in]. Decode and prefill read only the chosen
// experts' rows; each dot product is matvec's for one vector (the same bits as matvec on W_e).
//   x: [n_rows / x_div][n_in]  ids: [n_rows]  y: [n_rows][n_out]
void moe_matvec(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div,
                const int32_t* ids, int32_t n_rows, float* y, stream_t s);
// The same rows grouped by expert, as the CPU's prefill runs them: each expert's matrix is read
// once per chunk of up to moe_group_rows_per_chunk() of its rows instead of once per row (same
// bits as moe_matvec). moe_group lists the rows of ids [n_rows] by expert (row order within
// one), order [n_rows], and those lists cut into chunks: chunks[0] = n_chunks, then per chunk
// (expert, first index into order, n_rows <= rows per chunk); chunks holds
// 1 + 3 * moe_group_max_chunks(n_rows, n_expert) ints. Both run on the stream without a host
// sync (graph-capturable): the matvec launches moe_group_max_chunks blocks and the unused exit.
int32_t moe_group_rows_per_chunk();
int32_t moe_group_max_chunks(int32_t n_rows, int32_t n_expert);
void moe_group(const int32_t* ids, int32_t n_rows, int32_t n_expert, int32_t* order, int32_t* chunks, stream_t s);
void moe_matvec_grouped(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x,
                        int32_t x_div, const int32_t* order, const int32_t* chunks, int32_t max_chunks, float* y,
                        stream_t s);
// Batch-1 decode over f16/bf16 weights runs a variant: rows per warp (1, 2, 4) x 16-byte
// loads per row in flight (2, 4, 8; at most 16 in all). Every variant gives the same bits;
// this picks the speed (benchmarks sweep it; AGENTQ_MATVEC16="RxU" sets it at start-up).
bool matvec16_variant_ok(int rows, int loads);
bool set_matvec16_variant(int rows, int loads);  // false for an unsupported pair

// Dequantise rows [row0, row0+n_rows) of w to fp16: dst [n_rows][n_in]. Block formats: ggml's
// values rounded to fp16 (round to nearest even), from the matvec's lane decoders; the float types
// element by element, at most 65535 rows a call.
void dequantize_f16(weight_type type, const void* w, int64_t row0, int64_t n_rows, int64_t n_in, void* dst_f16,
                    stream_t s);
// fp32 -> fp16 / bf16, n elements.
void convert_f32_to_f16(const float* x, void* dst, int64_t n, stream_t s);
void convert_f32_to_bf16(const float* x, void* dst, int64_t n, stream_t s);

// cuBLAS handle (cublasHandle_t) bound to a stream; nullptr on failure. The library is opened
// (dlopen) at the first call, not at the process's start.
void* cublas_create(stream_t s);
// Why cuBLAS cannot be used (its library or an entry point missing); empty when it can. Opens it
// if not yet open; needs no device.
std::string cublas_load_error();
void cublas_destroy(void* handle);
// Bytes of scratch gemm() needs for (type, n_out, n_in, n_x).
size_t gemm_scratch_bytes(weight_type type, int64_t n_out, int64_t n_in, int32_t n_x);
// Prefill GEMM: y[i][o] = dot(W row o, x[i]) via cublasGemmEx (fp16/bf16 inputs, fp32
// accumulate and output). x is converted to the weight's 16-bit type; quantised and f32
// weights are dequantised to fp16 in tiles of rows first. scratch: gemm_scratch_bytes().
// NOTE: cuBLAS picks algorithms by shape, so unlike matvec this is not batch-invariant.
bool gemm(void* cublas, weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x,
          float* y, void* scratch, stream_t s);

// Logits processing and sampling, one row per sequence.
struct sample_params {
  float temperature = 1.0f;  // <= 0: greedy (argmax)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;         // Philox key
  uint64_t counter = 0;      // Philox counter (e.g. the sequence's step); same (seed, counter) -> same draw
};
// logits: [n_rows][n_vocab] (not modified)  params: [n_rows] (device)  out: [n_rows]
void sample(const float* logits, int32_t n_rows, int32_t n_vocab, const sample_params* params, int32_t* out,
            stream_t s);
// out[r] = index of the largest logit of row r (lowest index on ties).
void argmax(const float* logits, int32_t n_rows, int32_t n_vocab, int32_t* out, stream_t s);

// Grammar mask: logits[r][t] = -inf where bit t of mask[r] is clear.
//   mask: [n_rows][(n_vocab + 31) / 32] uint32, bit t%32 of word t/32
void apply_token_mask(float* logits, const uint32_t* mask, int32_t n_rows, int32_t n_vocab, stream_t s);

// Benchmark probe: streams n bytes (multiple of 16) and writes a checksum to *sink.
void read_bandwidth_probe(const void* buf, size_t n, float* sink, stream_t s);

// ---------------------------------------------------------------------------
// CUDA graphs: capture a decode step's launches once, replay it each step.
// ---------------------------------------------------------------------------
class graph {
 public:
  graph() = default;
  ~graph();
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  // Starts capturing launches issued on s (which must not be the legacy default stream).
  bool begin_capture(stream_t s);
  // Ends capture and instantiates (updating the existing executable graph when the
  // topology is unchanged). false on error; the previous executable stays usable.
  bool end_capture();
  bool replay(stream_t s);
  bool ready() const { return exec_ != nullptr; }

 private:
  void reset();
  stream_t stream_ = nullptr;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace agentq::kernels::cuda

// ---------------------------------------------------------------------------
// Plain C++ references (host pointers, same shapes and contracts as above).
// ---------------------------------------------------------------------------
namespace agentq::kernels::ref {

using cuda::weight_type;
using cuda::sample_params;

// Dequantise n elements (whole blocks) of type t from src to dst.
void dequantize(weight_type t, const void* src, float* dst, int64_t n);
void embedding(weight_type type, const void* table, const int32_t* ids, int32_t n_ids, int32_t n_embd, float* out);
void rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t n, float eps);
void rope(float* x, const int32_t* pos, int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
          float base, float scale, bool neox, const float* freq_factors = nullptr);
void add(float* x, const float* y, int64_t n);
void add_rows(float* x, const float* b, int32_t n_rows, int32_t n);
void gather_rows(const float* src, const int32_t* rows, int32_t n_rows, int32_t n, float* dst);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);
void scale(float* x, float factor, int64_t n);
void softcap(float* x, float cap, int64_t n);
void moe_topk(const float* logits, int32_t n_rows, int32_t n_expert, int32_t k, cuda::moe_gating gating, int32_t* ids,
              float* weights);
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);
void add_rows_by_id(float* x, const float* b, const int32_t* ids, int32_t n_rows, int32_t n);
void moe_combine(const float* y, const float* w, int32_t n_tok, int32_t k, int32_t n, float* out);
void moe_matvec(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div,
                const int32_t* ids, int32_t n_rows, float* y);
void moe_group(const int32_t* ids, int32_t n_rows, int32_t n_expert, int32_t per_chunk, int32_t* order,
               int32_t* chunks);
void rope_kv_write_table(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                         const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                         int32_t n_head_kv, int32_t head_dim, int32_t n_rot, bool neox, const float* inv_freq,
                         float mscale, int32_t block_size, float* k_cache, float* v_cache,
                         const cuda::kv_page_map& pages = {});
void kv_write(const float* k_new, const float* v_new, const int32_t* pos, const int32_t* tok_seq,
              const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t row, int32_t block_size,
              float* k_cache, float* v_cache, const cuda::kv_page_map& pages = {});
// Same partitioned split-K algorithm as the kernel (partials per attention_partition tokens).
void attention_decode(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                      int32_t max_blocks, const int32_t* seq_lens, int32_t n_seqs, int32_t n_head,
                      int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale, float* out,
                      const cuda::attention_options& opt = {});
void attention_prefill(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                       int32_t max_blocks, const int32_t* q_start, const int32_t* n_past, int32_t n_seqs,
                       int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale,
                       float* out, const cuda::attention_options& opt = {});
// y[i][o] = dot(dequant(W row o), x[i]) in double, rounded to float.
void matvec(weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y);
// The kernel's sampling rule on the host (see sample_rule in sample.cpp).
int32_t sample_row(const float* logits, int32_t n_vocab, const sample_params& p);
int32_t argmax_row(const float* logits, int32_t n_vocab);
void apply_token_mask(float* logits, const uint32_t* mask, int32_t n_rows, int32_t n_vocab);

// Philox4x32-10 (Salmon et al. 2011): the counter-based RNG the sampler draws from.
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
// The sampler's uniform draw in [0, 1) for (seed, counter).
float philox_uniform(uint64_t seed, uint64_t counter);

}  // namespace agentq::kernels::ref
