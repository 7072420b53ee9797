// The transformer forward pass over kernels/cuda, run from a layer_stack (describe_model) and
// mirroring engine/model/transformer.cpp step for step: embedding (scaled), norm, QKV (fused or
// not), biases, Q/K norms, RoPE from the stack's tables (NoPE layers, local bases, YaRN, LongRoPE),
// paged KV write, attention (windows, soft-caps, sinks; windowed KV: a windowed layer's blocks
// outside its window hold no page, and its attention visits only the window's), output (bias, post-norm), the gated FFN
// (SwiGLU, GeGLU, fused gate/up) or the mixture of experts, final norm, logits (soft-capped).
#if AGENTQ_HAVE_CUDA

#include "backend/cuda_forward.h"
#include "model/registry.h"
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gguf/reader.h"
#include "model/weights.h"

namespace agentq {

namespace cu = kernels::cuda;

namespace {

// Offsets (in int32s) of the per-batch index arrays packed into one upload.
struct index_layout {
  size_t ids, pos, tok_seq, tables, seq_lens, q_start, n_past, out_rows, total;
};

}  // namespace

std::unique_ptr<cuda_forward> cuda_forward::create(std::shared_ptr<const gguf::file> file, int32_t block_size,
                                                   int32_t n_blocks, std::string* error) {
  if (cu::device_count() == 0) {
    *error = "no CUDA device";
    return nullptr;
  }
  if (!file) {
    *error = "no model file";
    return nullptr;
  }
  // The CPU path's description of the model: metadata and shapes checked there, weights as views
  // into the mapping in the file's types (an empty weight_store copies nothing).
  const weight_store views;
  layer_stack d;
  if (!describe_model(*file, views, &d, error)) return nullptr;
  const std::string& arch_name = d.hp.arch;
  // NOTE: the registry's cuda flag is the switch for a family this pass has not been checked on:
  // it is refused by name rather than run wrong.
  const arch_entry* arch = find_architecture(arch_name);
  if (!arch || !arch->cuda) {
    *error = "architecture " + arch_name + " not supported on cuda yet (run it with device=cpu)";
    return nullptr;
  }
  if (d.hp.head_dim > cu::attention_max_head_dim) {
    *error = "architecture " + arch_name + ": head dimension " + std::to_string(d.hp.head_dim) +
             " exceeds the CUDA attention limit of 256";
    return nullptr;
  }
  std::unique_ptr<cuda_forward> m(new cuda_forward());
  m->file_ = std::move(file);
  m->hp_ = d.hp;
  m->block_size_ = block_size;
  // AGENTQ_CUDA_GRAPHS=0 launches every kernel of a decode step directly (A/B measurements).
  const char* graphs = std::getenv("AGENTQ_CUDA_GRAPHS");
  m->graphs_enabled_ = !(graphs && std::strcmp(graphs, "0") == 0);
  m->stream_ = cu::stream_create();
  m->cublas_ = m->stream_ ? cu::cublas_create(m->stream_) : nullptr;
  if (!m->cublas_) {
    *error = "CUDA stream / cuBLAS initialisation failed";
    return nullptr;
  }
  if (!m->upload(d.tok_embd, &m->tok_embd_, error) || !m->upload(d.output, &m->output_, error) ||
      !m->upload(d.output_norm, &m->output_norm_, error))
    return nullptr;
  for (const auto& freqs : d.rope_inv_freq) {
    m->rope_sets_.emplace_back();
    if (!m->upload(freqs, &m->rope_sets_.back(), error)) return nullptr;
  }
  m->layers_.resize(d.layers.size());
  for (size_t il = 0; il < d.layers.size(); ++il) {
    if (!m->upload_layer(d.layers[il], m->layers_[il], error)) return nullptr;
    d.layers[il] = layer_desc{};  // uploaded: free its host vectors
  }
  d.layers.clear();
  m->opts_ = std::move(d);
  if (n_blocks > 0 && !m->alloc_kv(block_size, n_blocks, error)) return nullptr;
  return m;
}

cuda_forward::mat cuda_forward::mat::rows(int64_t first, int64_t n) const {
  mat v = *this;
  v.data = static_cast<const uint8_t*>(data) + size_t(first) * cu::row_bytes(type, n_in);
  v.n_out = n;
  return v;
}

bool cuda_forward::upload(const weight& w, mat* out, std::string* error) {
  *out = mat{};
  if (!w) return true;
  const gguf::tensor_info* t = w.info;
  // NOTE: same ggml ids. describe_model refused a type the CPU does not support (gguf::is_supported);
  // cu::supported is the same set today, checked here by name.
  if (!cu::supported(static_cast<int32_t>(t->type))) {
    *error = "tensor " + t->name + " has weight type " + gguf::name_of(t->type) +
             ", which the CUDA backend does not support";
    return false;
  }
  out->type = static_cast<cu::weight_type>(static_cast<int32_t>(t->type));
  out->n_in = w.n_in;
  out->n_out = w.n_out;
  for (const auto& [info, dev] : uploaded_)
    if (info == t) {  // a tied output: the embedding's bytes
      out->data = dev;
      return true;
    }
  const size_t bytes = cu::row_bytes(out->type, w.n_in) * size_t(w.n_out);
  cu::device_buffer buf(bytes);
  if (!buf.ok() || !buf.upload(t->data, bytes)) {
    *error = "could not upload " + t->name + " to the device (" + std::to_string(bytes) + " bytes)";
    return false;
  }
  out->data = buf.data();
  uploaded_.emplace_back(t, buf.data());
  tensors_.push_back(std::move(buf));
  return true;
}

bool cuda_forward::upload(const std::vector<float>& v, cu::device_buffer* out, std::string* error) {
  if (v.empty()) return true;
  *out = cu::device_buffer(v.size() * 4);
  if (!out->ok() || !out->upload(v.data(), v.size() * 4)) {
    *error = "could not upload a vector of " + std::to_string(v.size()) + " floats to the device";
    return false;
  }
  return true;
}

bool cuda_forward::upload_layer(const layer_desc& L, dev_layer& D, std::string* error) {
  const int64_t n_q = int64_t(hp_.n_head) * hp_.head_dim, n_kvd = int64_t(hp_.n_head_kv) * hp_.head_dim;
  D.use_rope = L.use_rope;
  D.rope_set = L.rope_set;
  D.window = L.window;
  for (auto [v, b] : {std::pair{&L.attn_norm, &D.attn_norm}, {&L.bq, &D.bq}, {&L.bk, &D.bk}, {&L.bv, &D.bv},
                      {&L.q_norm, &D.q_norm}, {&L.k_norm, &D.k_norm}, {&L.bo, &D.bo}, {&L.sinks, &D.sinks},
                      {&L.attn_post_norm, &D.attn_post_norm}, {&L.ffn_norm, &D.ffn_norm},
                      {&L.ffn_post_norm, &D.ffn_post_norm}, {&L.moe_router_b, &D.moe_router_b},
                      {&L.moe_gate_b, &D.moe_gate_b}, {&L.moe_up_b, &D.moe_up_b}, {&L.moe_down_b, &D.moe_down_b}})
    if (!upload(*v, b, error)) return false;
  for (auto [w, dm] : {std::pair{&L.wq, &D.wq}, {&L.wk, &D.wk}, {&L.wv, &D.wv}, {&L.wo, &D.wo}, {&L.w_gate, &D.w_gate},
                       {&L.w_up, &D.w_up}, {&L.w_down, &D.w_down}, {&L.moe_router, &D.moe_router},
                       {&L.moe_gate, &D.moe_gate}, {&L.moe_up, &D.moe_up}, {&L.moe_down, &D.moe_down}})
    if (!upload(*w, dm, error)) return false;
  // Fused tensors (phi3) as views of their parts: q, k, v rows; gate rows, then up rows.
  if (L.wqkv) {
    mat qkv;
    if (!upload(L.wqkv, &qkv, error)) return false;
    D.wq = qkv.rows(0, n_q);
    D.wk = qkv.rows(n_q, n_kvd);
    D.wv = qkv.rows(n_q + n_kvd, n_kvd);
  }
  if (L.w_gate_up) {
    mat gu;
    if (!upload(L.w_gate_up, &gu, error)) return false;
    D.w_gate = gu.rows(0, hp_.n_ff);
    D.w_up = gu.rows(hp_.n_ff, hp_.n_ff);
  }
  return true;
}

bool cuda_forward::alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error, int32_t n_block_ids) {
  kv_ = {};  // NOTE: free the old blocks first, so a re-allocation can use their memory
  page_map_ = {};
  page_staging_ = {};
  page_table_ = nullptr;
  graph_key_.clear();
  block_size_ = block_size;
  const int64_t block_floats = int64_t(block_size) * hp_.n_head_kv * hp_.head_dim;
  // NOTE: windowed: the same bytes as every layer whole (n_blocks * n_layer pages), one pool the
  // layers share, as the host store's pages (kv_store).
  kv_ = n_block_ids > 0 ? cu::kv_device_alloc(1, n_blocks * hp_.n_layer, block_floats)
                        : cu::kv_device_alloc(hp_.n_layer, n_blocks, block_floats);
  if (!kv_.k.ok() || !kv_.v.ok()) {
    const double mib = double(kv_.block_floats) * 8.0 * hp_.n_layer * n_blocks / double(1 << 20);
    *error = "out of device memory for " + std::to_string(n_blocks) + " KV blocks (" +
             std::to_string(int64_t(mib)) + " MiB)";
    return false;
  }
  if (n_block_ids > 0) {
    const size_t bytes = size_t(n_block_ids) * size_t(hp_.n_layer) * 4;
    const std::vector<int32_t> none(size_t(n_block_ids) * size_t(hp_.n_layer), -1);
    page_map_ = cu::device_buffer(bytes);
    page_staging_ = cu::pinned_buffer(bytes);
    if (!page_map_.ok() || !page_staging_.ok() || !page_map_.upload(none.data(), bytes)) {
      page_map_ = {};
      *error = "out of device memory for the KV page map (" + std::to_string(bytes) + " bytes)";
      return false;
    }
  }
  return true;
}

bool cuda_forward::upload_pages() {
  if (!paged() || !page_table_) return true;
  std::vector<int32_t> dirty = page_table_->take_dirty();
  if (dirty.empty()) return true;
  // Runs of consecutive block ids, one copy each (a step changes a few blocks per sequence).
  std::sort(dirty.begin(), dirty.end());
  const size_t n_layer = size_t(hp_.n_layer);
  int32_t* stage = page_staging_.as<int32_t>();
  const int32_t* rows = page_table_->data();
  for (size_t i = 0; i < dirty.size();) {
    size_t j = i + 1;
    while (j < dirty.size() && dirty[j] == dirty[j - 1] + 1) ++j;
    const size_t off = size_t(dirty[i]) * n_layer, n = (j - i) * n_layer;
    std::copy(rows + off, rows + off + n, stage + off);
    if (!cu::memcpy_h2d_async(page_map_.as<int32_t>() + off, stage + off, n * 4, stream_)) return false;
    i = j;
  }
  return true;
}

cuda_forward::~cuda_forward() {
  if (stream_) cu::stream_synchronize(stream_);
  cu::cublas_destroy(cublas_);
  cu::stream_destroy(stream_);
}

float* cuda_forward::scratch(cu::device_buffer& b, size_t floats) {
  if (b.bytes() < floats * 4) b = cu::device_buffer(std::max<size_t>(floats * 4, 256));
  return b.as<float>();
}

bool cuda_forward::uses_matvec(const mat& w, int32_t n_x) {
  return n_x <= kGemmMinRows || w.type == cu::weight_type::f32;
}

void cuda_forward::linear(const mat& w, const float* x, int32_t n_x, float* y) {
  if (uses_matvec(w, n_x)) {
    cu::matvec(w.type, w.data, w.n_out, w.n_in, x, n_x, y, stream_);
    return;
  }
  const size_t need = cu::gemm_scratch_bytes(w.type, w.n_out, w.n_in, n_x);
  if (gemm_ws_.bytes() < need) gemm_ws_ = cu::device_buffer(need);
  cu::gemm(cublas_, w.type, w.data, w.n_out, w.n_in, x, n_x, y, gemm_ws_.data(), stream_);
}

void cuda_forward::residual_linear(const mat& w, const float* a, int32_t n_x, float* x, float* tmp) {
  if (uses_matvec(w, n_x)) {  // x += W a in the matvec's epilogue: the same bits as the separate add
    const cu::matvec_segment seg{w.data, x, w.n_out};
    cu::matvec_multi(w.type, &seg, 1, w.n_in, a, n_x, true, stream_);
    return;
  }
  linear(w, a, n_x, tmp);
  cu::add(x, tmp, int64_t(n_x) * w.n_out, stream_);
}

void cuda_forward::residual_out(const mat& w, const cu::device_buffer& b, const cu::device_buffer& post, const float* a,
                                int32_t n_x, float* x, float* tmp) {
  if (!b.ok() && !post.ok()) return residual_linear(w, a, n_x, x, tmp);
  const int32_t n = int32_t(w.n_out);
  linear(w, a, n_x, tmp);
  if (b.ok()) cu::add_rows(tmp, b.as<float>(), n_x, n, stream_);
  if (post.ok()) cu::rms_norm(tmp, post.as<float>(), tmp, n_x, n, hp_.rms_eps, stream_);
  cu::add(x, tmp, int64_t(n_x) * n, stream_);
}

int32_t cuda_forward::forward(std::span<const batch_seq> seqs, float* logits) {
  if (cu::cuda_failed()) return -1;
  const int32_t n_embd = hp_.n_embd, hd = hp_.head_dim, n_head = hp_.n_head, n_kv = hp_.n_head_kv;
  const int32_t n_q = n_head * hd, n_kvd = n_kv * hd, n_ff = hp_.n_ff, n_vocab = hp_.n_vocab, bs = block_size_;
  const int32_t n_seqs = int32_t(seqs.size());

  // Flatten the batch on the host: token rows, positions, owning sequence, block tables.
  std::vector<int32_t> ids, pos, tok_seq, seq_lens, q_start{0}, n_past, out_rows;
  int32_t max_blocks = 1, max_q = 0, max_len = 0;
  bool all_decode = true;
  for (const auto& s : seqs) {
    max_blocks = std::max(max_blocks, (s.n_past + s.n_tokens + bs - 1) / bs);
    all_decode = all_decode && s.n_tokens == 1;
  }
  // A small decode batch runs as one CUDA graph (launch overhead dominates it otherwise). Its
  // kernels' arguments must repeat step after step, so the block-table width and the
  // attention length are rounded up to kGraphBlocks blocks: the graph is re-captured (and
  // updated in place) only when that bucket, the batch size or a buffer changes.
  const bool graphed = graphs_enabled_ && all_decode && n_seqs <= kGemmMinRows;
  if (graphed) max_blocks = (max_blocks + kGraphBlocks - 1) / kGraphBlocks * kGraphBlocks;
  std::vector<int32_t> tables(size_t(n_seqs) * size_t(max_blocks), 0);
  for (int32_t si = 0; si < n_seqs; ++si) {
    const batch_seq& s = seqs[size_t(si)];
    const int32_t row0 = int32_t(ids.size());
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      token_id id = s.tokens[t];
      ids.push_back(id < 0 || id >= n_vocab ? 0 : id);  // NOTE: as the CPU path: never read outside the table
      pos.push_back(s.n_past + t);
      tok_seq.push_back(si);
    }
    for (int32_t t = s.all_logits ? 0 : s.n_tokens - 1; t >= 0 && t < s.n_tokens; ++t) out_rows.push_back(row0 + t);
    const int32_t nb = (s.n_past + s.n_tokens + bs - 1) / bs;
    std::copy(s.block_table, s.block_table + nb, tables.begin() + ptrdiff_t(si) * max_blocks);
    seq_lens.push_back(s.n_past + s.n_tokens);
    q_start.push_back(int32_t(ids.size()));
    n_past.push_back(s.n_past);
    max_q = std::max(max_q, s.n_tokens);
    max_len = std::max(max_len, s.n_past + s.n_tokens);
  }
  if (graphed) max_len = max_blocks * bs;  // attention partitions past a sequence's length exit at once
  const int32_t n_x = int32_t(ids.size()), n_out = int32_t(out_rows.size());
  if (n_x == 0) return 0;
  // One pinned staging buffer and one async copy for every index array of the batch.
  index_layout at{};
  size_t off = 0;
  auto place = [&](size_t n) { const size_t o = off; off += (n + 3) & ~size_t(3); return o; };  // 16-byte aligned
  at.ids = place(ids.size());
  at.pos = place(pos.size());
  at.tok_seq = place(tok_seq.size());
  at.tables = place(tables.size());
  at.seq_lens = place(seq_lens.size());
  at.q_start = place(q_start.size());
  at.n_past = place(n_past.size());
  at.out_rows = place(out_rows.size());
  at.total = off;
  if (staging_.bytes() < at.total * 4) staging_ = cu::pinned_buffer(at.total * 4 * 2);
  if (index_.bytes() < at.total * 4) index_ = cu::device_buffer(at.total * 4 * 2);
  if (!staging_.ok() || !index_.ok()) return -1;
  int32_t* host = staging_.as<int32_t>();
  auto put = [&](size_t o, const std::vector<int32_t>& v) { std::copy(v.begin(), v.end(), host + o); };
  put(at.ids, ids);
  put(at.pos, pos);
  put(at.tok_seq, tok_seq);
  put(at.tables, tables);
  put(at.seq_lens, seq_lens);
  put(at.q_start, q_start);
  put(at.n_past, n_past);
  put(at.out_rows, out_rows);
  // NOTE: staging is reused next call; forward() ends with a stream sync, so the copy is done by then.
  if (!cu::memcpy_h2d_async(index_.data(), host, at.total * 4, stream_)) return -1;
  if (!upload_pages()) return -1;  // windowed KV: pages the pool (re)assigned since the last step
  const int32_t* dev = index_.as<int32_t>();

  const int32_t k_used = opts_.n_expert_used, n_exp = opts_.n_expert, n_ff_e = opts_.n_ff_exp;
  const int32_t n_ffw = std::max(n_ff, 1);
  const int32_t n_moe = n_x * k_used;  // (token, chosen expert) rows
  float* x = scratch(x_, size_t(n_x) * n_embd);     // [n_x][n_embd] residual stream
  float* xb = scratch(xb_, size_t(n_x) * n_embd);   // [n_x][n_embd]
  float* q = scratch(q_, size_t(n_x) * n_q);        // [n_x][n_head*hd]
  float* k = scratch(k_, size_t(n_x) * n_kvd);      // [n_x][n_kv*hd]
  float* v = scratch(v_, size_t(n_x) * n_kvd);      // [n_x][n_kv*hd]
  float* att = scratch(att_, size_t(n_x) * n_q);    // [n_x][n_head*hd]
  float* hb = scratch(hb_, size_t(n_x) * std::max(n_ffw, n_embd));  // [n_x][n_ff]; the FFN's output when post-normed
  float* hb2 = scratch(hb2_, size_t(n_x) * n_ffw);  // [n_x][n_ff]
  float* rows = scratch(rows_, size_t(n_out) * n_embd);     // [n_out][n_embd]
  float* dlogits = scratch(logits_, size_t(n_out) * n_vocab);  // [n_out][n_vocab]
  float* ws = all_decode ? scratch(attn_ws_, cu::attention_decode_workspace_floats(n_seqs, n_head, hd, max_len))
                         : nullptr;
  float *router = nullptr, *moe_w = nullptr, *moe_g = nullptr, *moe_u = nullptr, *moe_y = nullptr;
  int32_t *moe_ids = nullptr, *moe_order = nullptr, *moe_chunks = nullptr;
  // NOTE: with more than one token the (token, expert) rows run grouped by expert, as the CPU's
  // prefill does: each expert's rows are read once per chunk of its tokens, not once per token.
  // One token keeps the per-row kernel (nothing to share; same bits either way).
  const bool moe_grouped = n_exp > 0 && n_x > 1;
  const int32_t moe_max_chunks = moe_grouped ? cu::moe_group_max_chunks(n_moe, n_exp) : 0;
  if (n_exp > 0) {
    router = scratch(router_, size_t(n_x) * n_exp);            // [n_x][n_expert] router logits
    moe_ids = reinterpret_cast<int32_t*>(scratch(moe_ids_, size_t(n_moe)));  // [n_x][k] chosen experts
    moe_w = scratch(moe_w_, size_t(n_moe));                     // [n_x][k] their weights
    moe_g = scratch(moe_g_, size_t(n_moe) * n_ff_e);            // [n_x][k][n_ff_exp]
    moe_u = scratch(moe_u_, size_t(n_moe) * n_ff_e);            // [n_x][k][n_ff_exp]
    moe_y = scratch(moe_y_, size_t(n_moe) * n_embd);            // [n_x][k][n_embd]
    if (!router || !moe_ids || !moe_w || !moe_g || !moe_u || !moe_y) return -1;
    if (moe_grouped) {
      moe_order = reinterpret_cast<int32_t*>(scratch(moe_order_, size_t(n_moe)));  // [n_moe] rows by expert
      moe_chunks = reinterpret_cast<int32_t*>(scratch(moe_chunks_, 1 + 3 * size_t(moe_max_chunks)));
      if (!moe_order || !moe_chunks) return -1;
    }
  }
  if (cu::cuda_failed() || !x || !xb || !q || !k || !v || !att || !hb || !hb2 || !rows || !dlogits) return -1;
  const int32_t* d_ids = dev + at.ids;
  const int32_t* d_pos = dev + at.pos;
  const int32_t* d_tables = dev + at.tables;
  // NOTE: as the CPU pass: a family with q_scale multiplies q (after RoPE) and leaves the scores unscaled.
  const float att_scale = opts_.q_scale != 0.0f ? 1.0f : 1.0f / std::sqrt(float(hd));
  const auto gating = opts_.gating == moe_gating::softmax_topk ? cu::moe_gating::topk_softmax : cu::moe_gating::softmax_norm;

  // y [n_moe][n_o] = W_{ids[r]} in[r / x_div] for every (token, expert) row r, grouped by expert or row by row.
  auto moe_rows = [&](const mat& w, int64_t n_o, int64_t n_i, const float* in, int32_t x_div, float* y) {
    if (moe_grouped)
      cu::moe_matvec_grouped(w.type, w.data, n_o, n_i, in, x_div, moe_order, moe_chunks, moe_max_chunks, y, stream_);
    else
      cu::moe_matvec(w.type, w.data, n_o, n_i, in, x_div, moe_ids, n_moe, y, stream_);
  };

  // The mixture of experts on xb into xb: router, top-k, each (token, expert) row's gate/up, the
  // activation, down, and the weighted sum in rank order (engine/model/moe.cpp's steps).
  auto moe_ffn = [&](const dev_layer& L) {
    linear(L.moe_router, xb, n_x, router);
    if (L.moe_router_b.ok()) cu::add_rows(router, L.moe_router_b.as<float>(), n_x, n_exp, stream_);
    cu::moe_topk(router, n_x, n_exp, k_used, gating, moe_ids, moe_w, stream_);
    if (moe_grouped) cu::moe_group(moe_ids, n_moe, n_exp, moe_order, moe_chunks, stream_);
    moe_rows(L.moe_gate, n_ff_e, n_embd, xb, k_used, moe_g);
    moe_rows(L.moe_up, n_ff_e, n_embd, xb, k_used, moe_u);
    if (L.moe_gate_b.ok()) {
      cu::add_rows_by_id(moe_g, L.moe_gate_b.as<float>(), moe_ids, n_moe, n_ff_e, stream_);
      cu::add_rows_by_id(moe_u, L.moe_up_b.as<float>(), moe_ids, n_moe, n_ff_e, stream_);
    }
    if (opts_.moe_act == ffn_act::swiglu_oai)
      cu::swiglu_oai(moe_g, moe_u, moe_g, int64_t(n_moe) * n_ff_e, stream_);
    else
      cu::swiglu(moe_g, moe_u, moe_g, int64_t(n_moe) * n_ff_e, stream_);
    moe_rows(L.moe_down, n_embd, n_ff_e, moe_g, 1, moe_y);
    if (L.moe_down_b.ok()) cu::add_rows_by_id(moe_y, L.moe_down_b.as<float>(), moe_ids, n_moe, n_embd, stream_);
    cu::moe_combine(moe_y, moe_w, n_x, k_used, n_embd, xb, stream_);
  };

  // Every launch of the step, in order (captured into graph_ when graphed).
  auto launch_step = [&] {
    cu::embedding(tok_embd_.type, tok_embd_.data, d_ids, n_x, n_embd, x, stream_);
    if (opts_.embd_scale != 0.0f) cu::scale(x, opts_.embd_scale, int64_t(n_x) * n_embd, stream_);
    for (int32_t il = 0; il < hp_.n_layer; ++il) {
      const dev_layer& L = layers_[size_t(il)];
      float* k_cache = this->k_cache(il);  // windowed KV: the page pool, read through page_map(il)
      float* v_cache = this->v_cache(il);
      const cu::kv_page_map pages = page_map(il);

      cu::rms_norm(x, L.attn_norm.as<float>(), xb, n_x, n_embd, hp_.rms_eps, stream_);
      if (uses_matvec(L.wq, n_x) && L.wq.type == L.wk.type && L.wq.type == L.wv.type) {  // one launch for Q, K, V
        const cu::matvec_segment qkv[3] = {{L.wq.data, q, n_q}, {L.wk.data, k, n_kvd}, {L.wv.data, v, n_kvd}};
        cu::matvec_multi(L.wq.type, qkv, 3, n_embd, xb, n_x, false, stream_);
      } else {
        linear(L.wq, xb, n_x, q);
        linear(L.wk, xb, n_x, k);
        linear(L.wv, xb, n_x, v);
      }
      if (L.bq.ok()) cu::add_rows(q, L.bq.as<float>(), n_x, n_q, stream_);
      if (L.bk.ok()) cu::add_rows(k, L.bk.as<float>(), n_x, n_kvd, stream_);
      if (L.bv.ok()) cu::add_rows(v, L.bv.as<float>(), n_x, n_kvd, stream_);
      if (L.q_norm.ok()) {  // qwen3, gemma3: each head's q and k RMS-normalised before RoPE (rows of head_dim)
        cu::rms_norm(q, L.q_norm.as<float>(), q, n_x * n_head, hd, hp_.rms_eps, stream_);
        cu::rms_norm(k, L.k_norm.as<float>(), k, n_x * n_kv, hd, hp_.rms_eps, stream_);
      }
      const float* inv_freq = L.use_rope ? rope_sets_[size_t(L.rope_set)].as<float>() : nullptr;
      cu::rope_kv_write_table(q, k, v, d_pos, dev + at.tok_seq, d_tables, max_blocks, n_x, n_head, n_kv, hd, hp_.n_rot,
                              hp_.rope_neox, inv_freq, opts_.rope_mscale, bs, k_cache, v_cache, stream_, pages);
      if (opts_.q_scale != 0.0f) cu::scale(q, opts_.q_scale, int64_t(n_x) * n_q, stream_);
      const cu::attention_options ao{L.window, opts_.attn_softcap, L.sinks.ok() ? L.sinks.as<float>() : nullptr,
                                     pages};
      if (all_decode) {
        cu::attention_decode(q, k_cache, v_cache, d_tables, max_blocks, dev + at.seq_lens, n_seqs, max_len,
                             n_head, n_kv, hd, bs, att_scale, ws, att, stream_, ao);
      } else {
        cu::attention_prefill(q, k_cache, v_cache, d_tables, max_blocks, dev + at.q_start, dev + at.n_past,
                              n_seqs, max_q, n_head, n_kv, hd, bs, att_scale, att, stream_, ao);
      }
      residual_out(L.wo, L.bo, L.attn_post_norm, att, n_x, x, xb);  // x += [post_norm](W_o att [+ b_o])

      cu::rms_norm(x, L.ffn_norm.as<float>(), xb, n_x, n_embd, hp_.rms_eps, stream_);
      if (L.moe_router) {
        moe_ffn(L);  // xb -> xb
        if (L.ffn_post_norm.ok()) cu::rms_norm(xb, L.ffn_post_norm.as<float>(), xb, n_x, n_embd, hp_.rms_eps, stream_);
        cu::add(x, xb, int64_t(n_x) * n_embd, stream_);
        continue;
      }
      if (opts_.act == ffn_act::gelu_tanh) {  // GeGLU (gemma): gelu(gate) * up, gelu through F16 as ggml
        if (uses_matvec(L.w_gate, n_x) && L.w_gate.type == L.w_up.type) {
          const cu::matvec_segment gu[2] = {{L.w_gate.data, hb, n_ff}, {L.w_up.data, hb2, n_ff}};
          cu::matvec_multi(L.w_gate.type, gu, 2, n_embd, xb, n_x, false, stream_);
        } else {
          linear(L.w_gate, xb, n_x, hb);
          linear(L.w_up, xb, n_x, hb2);
        }
        cu::gelu_mul(hb, hb2, hb, int64_t(n_x) * n_ff, stream_);
      } else if (uses_matvec(L.w_gate, n_x) && L.w_gate.type == L.w_up.type) {  // one launch for gate, up and SwiGLU
        cu::matvec_swiglu(L.w_gate.type, L.w_gate.data, L.w_up.data, n_ff, n_embd, xb, n_x, hb, stream_);
      } else {
        linear(L.w_gate, xb, n_x, hb);
        linear(L.w_up, xb, n_x, hb2);
        cu::swiglu(hb, hb2, hb, int64_t(n_x) * n_ff, stream_);
      }
      residual_out(L.w_down, cu::device_buffer{}, L.ffn_post_norm, hb, n_x, x, xb);  // x += [post_norm](W_down h)
    }
    cu::gather_rows(x, dev + at.out_rows, n_out, n_embd, rows, stream_);
    cu::rms_norm(rows, output_norm_.as<float>(), rows, n_out, n_embd, hp_.rms_eps, stream_);
    linear(output_, rows, n_out, dlogits);
    if (opts_.final_softcap != 0.0f) cu::softcap(dlogits, opts_.final_softcap, int64_t(n_out) * n_vocab, stream_);
  };
  if (graphed) {
    // What the captured launches depend on besides the device-side indices.
    const std::vector<uintptr_t> key = {
        uintptr_t(n_x),      uintptr_t(n_seqs),   uintptr_t(max_blocks), uintptr_t(n_out),
        uintptr_t(dev),      uintptr_t(x),        uintptr_t(xb),         uintptr_t(q),
        uintptr_t(k),        uintptr_t(v),        uintptr_t(att),        uintptr_t(hb),
        uintptr_t(hb2),      uintptr_t(rows),     uintptr_t(dlogits),    uintptr_t(ws),
        uintptr_t(kv_.k_layer(0)), uintptr_t(kv_.v_layer(0)), uintptr_t(router),   uintptr_t(moe_ids),
        uintptr_t(moe_w),    uintptr_t(moe_g),    uintptr_t(moe_u),      uintptr_t(moe_y),
        uintptr_t(moe_order), uintptr_t(moe_chunks), uintptr_t(page_map_.data())};
    if (key != graph_key_ || !graph_.ready()) {
      graph_key_.clear();
      bool captured = graph_.begin_capture(stream_);
      if (captured) {
        launch_step();
        captured = graph_.end_capture();
      }
      if (!captured) {
        // NOTE: a capture that fails (an op that cannot be captured) is not a device failure:
        // this engine launches directly from now on.
        std::fprintf(stderr, "agentq: CUDA graph capture failed; decode launches kernels directly\n");
        graphs_enabled_ = false;
        if (cu::cuda_failed()) return -1;
        launch_step();
      } else {
        graph_key_ = key;
        ++graph_captures_;
      }
    }
    if (!graph_key_.empty() && !graph_.replay(stream_)) return -1;
  } else {
    launch_step();
  }
  if (!cu::memcpy_d2h_async(logits, dlogits, size_t(n_out) * n_vocab * 4, stream_) ||
      !cu::stream_synchronize(stream_) || cu::cuda_failed())
    return -1;
  return n_out;
}

}  // namespace agentq

#endif  // AGENTQ_HAVE_CUDA
