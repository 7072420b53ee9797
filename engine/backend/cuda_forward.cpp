// The llama-family forward pass over kernels/cuda, mirroring engine/model/llama.cpp
// step for step (norm, QKV, biases, RoPE, paged KV write, attention, SwiGLU FFN).
#if AGENTQ_HAVE_CUDA

#include "backend/cuda_forward.h"
#include "model/registry.h"

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
  // The CPU model validates metadata and shapes; its weights are views into the mapping.
  auto cpu = model::load(file, 1, error, model::weights::validate);
  if (!cpu) return nullptr;
  // NOTE: this pass implements the llama/qwen2/qwen3 layer only; other registered families are refused
  // here rather than run wrong (registry.cpp marks which ones the CUDA pass runs).
  const arch_entry* arch = find_architecture(cpu->hparams().arch);
  if (!arch || !arch->cuda) {
    *error = "architecture " + cpu->hparams().arch + " not supported on cuda yet (run it with device=cpu)";
    return nullptr;
  }
  std::unique_ptr<cuda_forward> m(new cuda_forward());
  m->file_ = std::move(file);
  m->hp_ = cpu->hparams();
  m->block_size_ = block_size;
  // AGENTQ_CUDA_GRAPHS=0 launches every kernel of a decode step directly (A/B measurements).
  const char* graphs = std::getenv("AGENTQ_CUDA_GRAPHS");
  m->graphs_enabled_ = !(graphs && std::strcmp(graphs, "0") == 0);
  const auto& hp = m->hp_;
  if (hp.head_dim > cu::attention_max_head_dim) {
    *error = "head dimension " + std::to_string(hp.head_dim) + " exceeds the CUDA attention limit of 256";
    return nullptr;
  }
  if (hp.rope_yarn || hp.rope_attn_factor != 1.0f) {
    *error = "YaRN RoPE scaling and rope.scaling.attn_factor run on the CPU backend only (the CUDA rope "
             "kernels take a linear scale and rope_freqs)";
    return nullptr;
  }
  m->stream_ = cu::stream_create();
  m->cublas_ = m->stream_ ? cu::cublas_create(m->stream_) : nullptr;
  if (!m->cublas_) {
    *error = "CUDA stream / cuBLAS initialisation failed";
    return nullptr;
  }
  const int64_t n_embd = hp.n_embd, hd = hp.head_dim;
  if (!m->upload_matrix("token_embd.weight", n_embd, hp.n_vocab, &m->tok_embd_, error)) return nullptr;
  if (m->file_->find_tensor("output.weight")) {
    if (!m->upload_matrix("output.weight", n_embd, hp.n_vocab, &m->output_, error)) return nullptr;
  } else if (!m->upload_matrix("token_embd.weight", n_embd, hp.n_vocab, &m->output_, error)) {  // tied
    return nullptr;
  }
  if (!m->upload_vector("output_norm.weight", n_embd, &m->output_norm_, false, error) ||
      !m->upload_vector("rope_freqs.weight", hp.n_rot / 2, &m->rope_freqs_, true, error))
    return nullptr;
  m->layers_.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    dev_layer& L = m->layers_[size_t(il)];
    if (!m->upload_vector(b + "attn_norm.weight", n_embd, &L.attn_norm, false, error) ||
        !m->upload_matrix(b + "attn_q.weight", n_embd, hp.n_head * hd, &L.wq, error) ||
        !m->upload_matrix(b + "attn_k.weight", n_embd, hp.n_head_kv * hd, &L.wk, error) ||
        !m->upload_matrix(b + "attn_v.weight", n_embd, hp.n_head_kv * hd, &L.wv, error) ||
        !m->upload_matrix(b + "attn_output.weight", hp.n_head * hd, n_embd, &L.wo, error) ||
        !m->upload_vector(b + "attn_q.bias", hp.n_head * hd, &L.bq, true, error) ||
        !m->upload_vector(b + "attn_k.bias", hp.n_head_kv * hd, &L.bk, true, error) ||
        !m->upload_vector(b + "attn_v.bias", hp.n_head_kv * hd, &L.bv, true, error) ||
        !m->upload_vector(b + "attn_q_norm.weight", hd, &L.q_norm, true, error) ||
        !m->upload_vector(b + "attn_k_norm.weight", hd, &L.k_norm, true, error) ||
        !m->upload_vector(b + "ffn_norm.weight", n_embd, &L.ffn_norm, false, error) ||
        !m->upload_matrix(b + "ffn_gate.weight", n_embd, hp.n_ff, &L.w_gate, error) ||
        !m->upload_matrix(b + "ffn_up.weight", n_embd, hp.n_ff, &L.w_up, error) ||
        !m->upload_matrix(b + "ffn_down.weight", hp.n_ff, n_embd, &L.w_down, error))
      return nullptr;
  }
  for (const auto& L : m->layers_)
    if (L.q_norm.ok() != L.k_norm.ok()) {
      *error = "attn_q_norm.weight and attn_k_norm.weight come together (qwen3); the file has one without the other";
      return nullptr;
    }
  if (n_blocks > 0 && !m->alloc_kv(block_size, n_blocks, error)) return nullptr;
  return m;
}

bool cuda_forward::alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error) {
  kv_ = {};  // NOTE: free the old blocks first, so a re-allocation can use their memory
  block_size_ = block_size;
  kv_ = cu::kv_device_alloc(hp_.n_layer, n_blocks, int64_t(block_size) * hp_.n_head_kv * hp_.head_dim);
  if (!kv_.k.ok() || !kv_.v.ok()) {
    const double mib = double(kv_.block_floats) * 8.0 * hp_.n_layer * n_blocks / double(1 << 20);
    *error = "out of device memory for " + std::to_string(n_blocks) + " KV blocks (" +
             std::to_string(int64_t(mib)) + " MiB)";
    return false;
  }
  return true;
}

cuda_forward::~cuda_forward() {
  if (stream_) cu::stream_synchronize(stream_);
  cu::cublas_destroy(cublas_);
  cu::stream_destroy(stream_);
}

bool cuda_forward::upload_matrix(const std::string& name, int64_t n_in, int64_t n_out, dev_weight* w,
                                 std::string* error) {
  const gguf::tensor_info* t = file_->find_tensor(name);
  if (!t) {
    *error = "missing tensor " + name;
    return false;
  }
  // NOTE: same ggml ids. create() ran model::load first, which refuses a type the CPU does not
  // support (gguf::is_supported); cu::supported is the same set today, checked here by name.
  if (!cu::supported(static_cast<int32_t>(t->type))) {
    *error = "tensor " + name + " has weight type " + gguf::name_of(t->type) + ", which the CUDA backend does not support";
    return false;
  }
  w->type = static_cast<cu::weight_type>(static_cast<int32_t>(t->type));
  w->n_in = n_in;
  w->n_out = n_out;
  const size_t bytes = cu::row_bytes(w->type, n_in) * size_t(n_out);
  w->data = cu::device_buffer(bytes);
  if (!w->data.ok() || !w->data.upload(t->data, bytes)) {
    *error = "could not upload " + name + " to the device (" + std::to_string(bytes) + " bytes)";
    return false;
  }
  return true;
}

bool cuda_forward::upload_vector(const std::string& name, int64_t n, cu::device_buffer* out, bool optional,
                                 std::string* error) {
  const gguf::tensor_info* t = file_->find_tensor(name);
  if (!t) {
    if (!optional) *error = "missing tensor " + name;
    return optional;
  }
  std::vector<float> host(static_cast<size_t>(n));
  dequantize_row(t->type, t->data, host.data(), n);
  *out = cu::device_buffer(host.size() * 4);
  if (!out->ok() || !out->upload(host.data(), host.size() * 4)) {
    *error = "could not upload " + name + " to the device";
    return false;
  }
  return true;
}

float* cuda_forward::scratch(cu::device_buffer& b, size_t floats) {
  if (b.bytes() < floats * 4) b = cu::device_buffer(std::max<size_t>(floats * 4, 256));
  return b.as<float>();
}

bool cuda_forward::uses_matvec(const dev_weight& w, int32_t n_x) {
  return n_x <= kGemmMinRows || w.type == cu::weight_type::f32;
}

void cuda_forward::linear(const dev_weight& w, const float* x, int32_t n_x, float* y) {
  if (uses_matvec(w, n_x)) {
    cu::matvec(w.type, w.data.data(), w.n_out, w.n_in, x, n_x, y, stream_);
    return;
  }
  const size_t need = cu::gemm_scratch_bytes(w.type, w.n_out, w.n_in, n_x);
  if (gemm_ws_.bytes() < need) gemm_ws_ = cu::device_buffer(need);
  cu::gemm(cublas_, w.type, w.data.data(), w.n_out, w.n_in, x, n_x, y, gemm_ws_.data(), stream_);
}

void cuda_forward::residual_linear(const dev_weight& w, const float* a, int32_t n_x, float* x, float* tmp) {
  if (uses_matvec(w, n_x)) {  // x += W a in the matvec's epilogue: the same bits as the separate add
    const cu::matvec_segment seg{w.data.data(), x, w.n_out};
    cu::matvec_multi(w.type, &seg, 1, w.n_in, a, n_x, true, stream_);
    return;
  }
  linear(w, a, n_x, tmp);
  cu::add(x, tmp, int64_t(n_x) * w.n_out, stream_);
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
  const int32_t* dev = index_.as<int32_t>();

  float* x = scratch(x_, size_t(n_x) * n_embd);     // [n_x][n_embd] residual stream
  float* xb = scratch(xb_, size_t(n_x) * n_embd);   // [n_x][n_embd]
  float* q = scratch(q_, size_t(n_x) * n_q);        // [n_x][n_head*hd]
  float* k = scratch(k_, size_t(n_x) * n_kvd);      // [n_x][n_kv*hd]
  float* v = scratch(v_, size_t(n_x) * n_kvd);      // [n_x][n_kv*hd]
  float* att = scratch(att_, size_t(n_x) * n_q);    // [n_x][n_head*hd]
  float* hb = scratch(hb_, size_t(n_x) * n_ff);     // [n_x][n_ff]
  float* hb2 = scratch(hb2_, size_t(n_x) * n_ff);   // [n_x][n_ff]
  float* rows = scratch(rows_, size_t(n_out) * n_embd);     // [n_out][n_embd]
  float* dlogits = scratch(logits_, size_t(n_out) * n_vocab);  // [n_out][n_vocab]
  float* ws = all_decode ? scratch(attn_ws_, cu::attention_decode_workspace_floats(n_seqs, n_head, hd, max_len))
                         : nullptr;
  if (cu::cuda_failed() || !x || !xb || !q || !k || !v || !att || !hb || !hb2 || !rows || !dlogits) return -1;
  const int32_t* d_ids = dev + at.ids;
  const int32_t* d_pos = dev + at.pos;
  const int32_t* d_tables = dev + at.tables;
  const float* freqs = rope_freqs_.ok() ? rope_freqs_.as<float>() : nullptr;
  const float att_scale = 1.0f / std::sqrt(float(hd));

  // Every launch of the step, in order (captured into graph_ when graphed).
  auto launch_step = [&] {
    cu::embedding(tok_embd_.type, tok_embd_.data.data(), d_ids, n_x, n_embd, x, stream_);
    for (int32_t il = 0; il < hp_.n_layer; ++il) {
      const dev_layer& L = layers_[size_t(il)];
      float* k_cache = kv_.k_layer(il);
      float* v_cache = kv_.v_layer(il);

      cu::rms_norm(x, L.attn_norm.as<float>(), xb, n_x, n_embd, hp_.rms_eps, stream_);
      if (uses_matvec(L.wq, n_x) && L.wq.type == L.wk.type && L.wq.type == L.wv.type) {  // one launch for Q, K, V
        const cu::matvec_segment qkv[3] = {{L.wq.data.data(), q, n_q}, {L.wk.data.data(), k, n_kvd},
                                           {L.wv.data.data(), v, n_kvd}};
        cu::matvec_multi(L.wq.type, qkv, 3, n_embd, xb, n_x, false, stream_);
      } else {
        linear(L.wq, xb, n_x, q);
        linear(L.wk, xb, n_x, k);
        linear(L.wv, xb, n_x, v);
      }
      if (L.bq.ok()) cu::add_rows(q, L.bq.as<float>(), n_x, n_q, stream_);
      if (L.bk.ok()) cu::add_rows(k, L.bk.as<float>(), n_x, n_kvd, stream_);
      if (L.bv.ok()) cu::add_rows(v, L.bv.as<float>(), n_x, n_kvd, stream_);
      if (L.q_norm.ok()) {  // qwen3: each head's q and k RMS-normalised before RoPE (rows of head_dim)
        cu::rms_norm(q, L.q_norm.as<float>(), q, n_x * n_head, hd, hp_.rms_eps, stream_);
        cu::rms_norm(k, L.k_norm.as<float>(), k, n_x * n_kv, hd, hp_.rms_eps, stream_);
      }
      cu::rope_kv_write(q, k, v, d_pos, dev + at.tok_seq, d_tables, max_blocks, n_x, n_head, n_kv, hd, hp_.n_rot,
                        hp_.rope_base, hp_.rope_scale, hp_.rope_neox, freqs, bs, k_cache, v_cache, stream_);
      if (all_decode) {
        cu::attention_decode(q, k_cache, v_cache, d_tables, max_blocks, dev + at.seq_lens, n_seqs, max_len,
                             n_head, n_kv, hd, bs, att_scale, ws, att, stream_);
      } else {
        cu::attention_prefill(q, k_cache, v_cache, d_tables, max_blocks, dev + at.q_start, dev + at.n_past,
                              n_seqs, max_q, n_head, n_kv, hd, bs, att_scale, att, stream_);
      }
      residual_linear(L.wo, att, n_x, x, xb);

      cu::rms_norm(x, L.ffn_norm.as<float>(), xb, n_x, n_embd, hp_.rms_eps, stream_);
      if (uses_matvec(L.w_gate, n_x) && L.w_gate.type == L.w_up.type) {  // one launch for gate, up and SwiGLU
        cu::matvec_swiglu(L.w_gate.type, L.w_gate.data.data(), L.w_up.data.data(), n_ff, n_embd, xb, n_x, hb,
                          stream_);
      } else {
        linear(L.w_gate, xb, n_x, hb);
        linear(L.w_up, xb, n_x, hb2);
        cu::swiglu(hb, hb2, hb, int64_t(n_x) * n_ff, stream_);
      }
      residual_linear(L.w_down, hb, n_x, x, xb);
    }
    cu::gather_rows(x, dev + at.out_rows, n_out, n_embd, rows, stream_);
    cu::rms_norm(rows, output_norm_.as<float>(), rows, n_out, n_embd, hp_.rms_eps, stream_);
    linear(output_, rows, n_out, dlogits);
  };
  if (graphed) {
    // What the captured launches depend on besides the device-side indices.
    const std::vector<uintptr_t> key = {
        uintptr_t(n_x),      uintptr_t(n_seqs),   uintptr_t(max_blocks), uintptr_t(n_out),
        uintptr_t(dev),      uintptr_t(x),        uintptr_t(xb),         uintptr_t(q),
        uintptr_t(k),        uintptr_t(v),        uintptr_t(att),        uintptr_t(hb),
        uintptr_t(hb2),      uintptr_t(rows),     uintptr_t(dlogits),    uintptr_t(ws),
        uintptr_t(kv_.k_layer(0)), uintptr_t(kv_.v_layer(0))};
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
