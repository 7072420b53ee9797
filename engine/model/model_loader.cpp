// model::load: finds the file's architecture in the registry, copies the weights into the
// CPU layouts, and lets the family file fill a layer_stack through model_loader's checked
// metadata and tensor readers (shared hyper-parameters, output head, RoPE tables).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "agentq/kernels.h"
#include "model/registry.h"
#include "model/transformer.h"

namespace agentq {

bool model_loader::common_hparams() {
  model_hparams& hp = d_.hp;
  auto req_int = [&](const char* key, int32_t* out) {
    auto v = get_int(key);
    if (!v || *v <= 0 || *v > (1 << 30)) return fail("missing or invalid metadata " + hp.arch + "." + key);
    *out = int32_t(*v);
    return true;
  };
  if (!req_int("embedding_length", &hp.n_embd) || !req_int("block_count", &hp.n_layer) ||
      !req_int("attention.head_count", &hp.n_head))
    return false;
  // NOTE: MoE files may leave the dense FFN width out; families that need it check n_ff.
  hp.n_ff = int32_t(get_int("feed_forward_length").value_or(0));
  if (hp.n_ff < 0 || hp.n_ff > (1 << 30)) return fail("invalid metadata " + hp.arch + ".feed_forward_length");
  hp.n_ctx = int32_t(get_int("context_length").value_or(2048));
  hp.n_head_kv = int32_t(get_int("attention.head_count_kv").value_or(hp.n_head));
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return fail("attention.head_count_kv must divide attention.head_count");
  hp.head_dim = int32_t(get_int("attention.key_length").value_or(hp.n_embd / hp.n_head));
  const int64_t v_len = get_int("attention.value_length").value_or(hp.head_dim);
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0) return fail("invalid head dimension");
  if (v_len != hp.head_dim) return fail("attention.value_length differs from attention.key_length (not supported)");
  hp.rms_eps = float(get_float("attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp.rope_base = float(get_float("rope.freq_base").value_or(10000.0));
  hp.n_rot = int32_t(get_int("rope.dimension_count").value_or(hp.head_dim));
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) return fail("invalid rope.dimension_count");
  if (!parse_rope_scaling(f_, hp.arch, hp.n_ctx, &rope_scaling_, error_)) return false;
  // rope_scale: the linear frequency scale (the CUDA backend applies it; YaRN goes through rope_angles).
  hp.rope_scale = rope_scaling_.type == rope_scaling::kind::linear ? 1.0f / rope_scaling_.factor : 1.0f;
  hp.rope_yarn = rope_scaling_.type == rope_scaling::kind::yarn;
  hp.rope_attn_factor = rope_scaling_.attn_factor;
  d_.rope_mscale = rope_scaling_.attn_factor;
  return true;
}

bool model_loader::common_output() {
  const int64_t n_embd = d_.hp.n_embd;
  if (!matrix("token_embd.weight", n_embd, 0, &d_.tok_embd)) return false;
  d_.hp.n_vocab = int32_t(d_.tok_embd.n_out);
  if (!matrix("output.weight", n_embd, d_.hp.n_vocab, &d_.output, true)) return false;
  if (!d_.output) d_.output = d_.tok_embd;
  return vec("output_norm.weight", n_embd, &d_.output_norm);
}

// theta_i = pos * scale * base^(-2i/n_rot) [/ factors[i]] (Llama 3.1 rope_freqs, Phi-3 LongRoPE).
void model_loader::add_rope_set(float base, float scale, const std::vector<float>* factors) {
  const int32_t n_rot = d_.hp.n_rot;
  if (rope_scaling_.type == rope_scaling::kind::yarn && base == d_.hp.rope_base) {
    // YaRN (GPT-OSS, Qwen2.5 long context): ramped angles and the cos/sin magnitude as llama.cpp.
    std::vector<float> inv;
    rope_angles(rope_scaling_, n_rot, base, factors ? *factors : std::vector<float>{}, &inv, &d_.rope_mscale);
    d_.rope_inv_freq.push_back(std::move(inv));
    return;
  }
  std::vector<float> inv(size_t(n_rot / 2));
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  float theta = scale;
  for (int32_t i = 0; i < n_rot / 2; ++i) {
    inv[size_t(i)] = factors && !factors->empty() ? theta / (*factors)[size_t(i)] : theta;
    theta *= theta_scale;
  }
  d_.rope_inv_freq.push_back(std::move(inv));
}

bool model_loader::tensor(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_mat, weight* w,
                          bool optional) {
  const gguf::tensor_info* t = f_.find_tensor(name);
  if (!t) {
    if (!optional) fail("missing tensor " + name);
    return optional;
  }
  if (!gguf::is_supported(t->type))
    return fail("tensor " + name + " has weight type " + gguf::name_of(t->type) +
                ", which this engine does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)");
  const int64_t d1 = t->dims.size() > 1 ? t->dims[1] : 1;
  const int64_t d2 = t->dims.size() > 2 ? t->dims[2] : 1;
  bool rest_one = true;
  for (size_t i = 3; i < t->dims.size(); ++i) rest_one = rest_one && t->dims[i] == 1;
  if (t->dims.empty() || t->dims[0] != n_in || (n_out > 0 && d1 != n_out) || d2 != n_mat || !rest_one)
    return fail("tensor " + name + " has an unexpected shape");
  auto tr = gguf::traits_of(t->type);
  if (n_in % tr.block_size != 0) return fail("tensor " + name + ": row length not a multiple of its block size");
  w->info = t;
  w->type = t->type;
  w->layout = store_.layout(*t);
  w->data = store_.relocate(t->data);
  w->n_in = n_in;
  w->n_out = d1 * d2;
  w->row_bytes = kernels::row_bytes(w->layout, n_in);
  return true;
}

bool model_loader::matrix(const std::string& name, int64_t n_in, int64_t n_out, weight* w, bool optional) {
  return tensor(name, n_in, n_out, 1, w, optional);
}

bool model_loader::stacked(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_mat, weight* w) {
  return tensor(name, n_in, n_out, n_mat, w, false);
}

bool model_loader::vec(const std::string& name, int64_t n, std::vector<float>* out, bool optional) {
  weight w;
  if (!tensor(name, n, 1, 1, &w, optional)) return false;
  if (!w) return true;
  out->resize(size_t(n));
  dequantize_row(w.type, w.data, out->data(), n);
  return true;
}

bool model_loader::vecs(const std::string& name, int64_t n, int64_t n_rows, std::vector<float>* out) {
  weight w;
  if (!tensor(name, n, n_rows, 1, &w, false)) return false;
  // NOTE: from the file's own bytes: a 2-d tensor may have been repacked for the matrix kernels.
  const gguf::tensor_info* t = w.info;
  const size_t rb = size_t(n / gguf::traits_of(t->type).block_size) * size_t(gguf::traits_of(t->type).type_size);
  out->resize(size_t(n * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(t->type, t->data + size_t(r) * rb, out->data() + size_t(r * n), n);
  return true;
}

bool describe_model(const gguf::file& f, const weight_store& store, layer_stack* d, std::string* error) {
  auto arch = f.get_string("general.architecture");
  if (!arch) {
    *error = "missing general.architecture";
    return false;
  }
  const arch_entry* entry = find_architecture(*arch);
  if (!entry) {
    *error = "unsupported architecture '" + std::string(*arch) + "' (supported: " + architecture_names() + ")";
    return false;
  }
  *d = layer_stack{};
  d->hp.arch = std::string(*arch);
  model_loader ld(f, store, *d, error);
  if (!entry->build(ld)) return false;
  if (d->rope_inv_freq.empty()) ld.add_rope_set(d->hp.rope_base, d->hp.rope_scale);
  if (int32_t(d->layers.size()) != d->hp.n_layer || d->output_norm.empty()) {
    *error = "architecture '" + d->hp.arch + "': incomplete model description";
    return false;
  }
  d->hp.layer_window.clear();
  for (const auto& L : d->layers) d->hp.layer_window.push_back(L.window);
  return true;
}

std::unique_ptr<model> model::load(std::shared_ptr<const gguf::file> file, int32_t n_threads, std::string* error,
                                   weights mode) {
  if (!file) {
    *error = "no model file";
    return nullptr;
  }
  auto arch = file->get_string("general.architecture");
  if (!arch) {
    *error = "missing general.architecture";
    return nullptr;
  }
  const arch_entry* entry = find_architecture(*arch);
  if (!entry) {
    *error = "unsupported architecture '" + std::string(*arch) + "' (supported: " + architecture_names() + ")";
    return nullptr;
  }
  auto store = std::make_unique<weight_store>();
  if (mode == model::weights::compute) {
    // Matrices in the layout the CPU kernels run fastest on; the token embedding (whose rows
    // are looked up one by one, and which a tied output shares) and stacked experts (whose
    // rows are sliced per expert) keep the file's. AGENTQ_REPACK=0 keeps every file layout.
    const char* repack = std::getenv("AGENTQ_REPACK");
    const bool allow = !(repack && std::strcmp(repack, "0") == 0);
    store->load(*file, [allow](const gguf::tensor_info& t) {
      const auto type = kernels::weight_type(uint32_t(t.type));
      if (!allow || t.name == "token_embd.weight" || t.dims.size() != 2) return type;
      return kernels::preferred_layout(type, t.dims[1], t.dims[0]);
    });
  }
  layer_stack d;
  if (!describe_model(*file, *store, &d, error)) return nullptr;
  // NOTE: "one thread per core" (n_threads <= 0) means one thread for a model whose weights are
  // under k_one_thread_model_bytes. Its ops are too small to repay a fork-join each (~45 per step):
  // a 512-token prefill step of stories260K (1 MiB) is ~5 ms on one core, and a second thread
  // spent more CPU on waiting (spinning between ops, waking, waiting for a preempted worker's
  // chunk on a host whose cores the service also uses) than it took off (queue_perf.md, session
  // 21 queue7c: -11 to -14 % CPU-s per batch job, jobs/s not lower). Outputs are the same at any
  // thread count (thread_pool::parallel_for's contract). An explicit n_threads is kept.
  if (n_threads <= 0) {
    uint64_t weight_bytes = 0;
    for (const auto& t : file->tensors()) weight_bytes += t.n_bytes;
    if (weight_bytes < k_one_thread_model_bytes) n_threads = 1;
  }
  return make_transformer(std::move(file), std::move(store), std::move(d), n_threads);
}

}  // namespace agentq

namespace agentq {

bool model_loader::attention(int32_t il, layer_desc& L, bool biases) {
  const model_hparams& hp = d_.hp;
  const int64_t n_embd = hp.n_embd, n_q = int64_t(hp.n_head) * hp.head_dim, n_kv = int64_t(hp.n_head_kv) * hp.head_dim;
  if (!vec(blk(il, "attn_norm.weight"), n_embd, &L.attn_norm) ||
      !matrix(blk(il, "attn_qkv.weight"), n_embd, n_q + 2 * n_kv, &L.wqkv, true))
    return false;
  if (!L.wqkv && (!matrix(blk(il, "attn_q.weight"), n_embd, n_q, &L.wq) ||
                  !matrix(blk(il, "attn_k.weight"), n_embd, n_kv, &L.wk) ||
                  !matrix(blk(il, "attn_v.weight"), n_embd, n_kv, &L.wv)))
    return false;
  if (!vec(blk(il, "attn_q.bias"), n_q, &L.bq, !biases) || !vec(blk(il, "attn_k.bias"), n_kv, &L.bk, !biases) ||
      !vec(blk(il, "attn_v.bias"), n_kv, &L.bv, !biases))
    return false;
  if (L.bq.empty() != L.bk.empty() || L.bq.empty() != L.bv.empty() || (L.wqkv && !L.bq.empty()))
    return fail("layer " + std::to_string(il) + ": q/k/v biases must come together (and not with attn_qkv)");
  return matrix(blk(il, "attn_output.weight"), n_q, n_embd, &L.wo);
}

bool model_loader::qk_norm(int32_t il, layer_desc& L) {
  return vec(blk(il, "attn_q_norm.weight"), d_.hp.head_dim, &L.q_norm) &&
         vec(blk(il, "attn_k_norm.weight"), d_.hp.head_dim, &L.k_norm);
}

bool model_loader::ffn_gated(int32_t il, layer_desc& L) {
  const int64_t n_embd = d_.hp.n_embd, n_ff = d_.hp.n_ff;
  if (n_ff <= 0) return fail("missing or invalid metadata " + d_.hp.arch + ".feed_forward_length");
  return vec(blk(il, "ffn_norm.weight"), n_embd, &L.ffn_norm) && matrix(blk(il, "ffn_gate.weight"), n_embd, n_ff, &L.w_gate) &&
         matrix(blk(il, "ffn_up.weight"), n_embd, n_ff, &L.w_up) && matrix(blk(il, "ffn_down.weight"), n_ff, n_embd, &L.w_down);
}

}  // namespace agentq
