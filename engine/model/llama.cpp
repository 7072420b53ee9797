// The llama-family transformer on the CPU: Llama 2/3, Mistral, TinyLlama, SmolLM
// (arch "llama") and Qwen2 (arch "qwen2": q/k/v biases, NeoX RoPE). GQA, RMSNorm,
// SwiGLU; K/V live in the paged kv_store, reached through each sequence's block table.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/rope_scaling.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace agentq {

namespace {

struct layer_weights {
  std::vector<float> attn_norm;   // [n_embd]
  weight wq, wk, wv, wo;          // [n_head*hd][n_embd], [n_kv*hd][n_embd] x2, [n_embd][n_head*hd]
  std::vector<float> bq, bk, bv;  // qwen2 biases (empty for llama)
  std::vector<float> ffn_norm;    // [n_embd]
  weight w_gate, w_up, w_down;    // [n_ff][n_embd] x2, [n_embd][n_ff]
};

class llama_model final : public model {
 public:
  static std::unique_ptr<model> create(std::shared_ptr<const gguf::file> file, int32_t n_threads, model::weights mode,
                                       std::string* error);

  const model_hparams& hparams() const override { return hp_; }
  int32_t forward(std::span<const batch_seq> seqs, kv_store& kv, float* logits) override;

 private:
  explicit llama_model(int32_t n_threads) : pool_(n_threads) {}
  bool load_hparams(std::string* error);
  bool load_weights(std::string* error);
  void rope(float* vec, int32_t n_heads, const float* cs) const;  // cs: one token's rope_cs_ row

  std::shared_ptr<const gguf::file> file_;
  weight_store store_;  // the tensor data on huge pages (weights point into it)
  model_hparams hp_;
  thread_pool pool_;
  weight tok_embd_;                 // [n_vocab][n_embd]
  weight output_;                   // [n_vocab][n_embd] (= tok_embd_ when tied)
  std::vector<float> output_norm_;  // [n_embd]
  std::vector<layer_weights> layers_;
  std::vector<float> rope_inv_freq_;
  rope_scaling rope_scaling_;
  float rope_mscale_ = 1.0f;  // YaRN's magnitude scale on cos/sin (1 otherwise)  // [n_rot/2] angle per position of each rotated pair

  // Scratch, grown on demand. NOTE: forward() is not reentrant (one engine thread calls it).
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, out_rows_;
  // [n_x][cos, sin][n_rot]: each token's rotation, once per forward; entry d holds the angle of
  // the pair that dim d belongs to (both dims of a pair), so rope() reads them as vectors.
  std::vector<float> rope_cs_;
  std::vector<int32_t> tok_seq_, tok_pos_;
  std::vector<std::pair<int32_t, int32_t>> runs_;  // attention runs: (first token, count)
};

// --- loading ----------------------------------------------------------------

bool llama_model::load_hparams(std::string* error) {
  const gguf::file& f = *file_;
  auto arch = f.get_string("general.architecture");
  if (!arch) {
    *error = "missing general.architecture";
    return false;
  }
  hp_.arch = std::string(*arch);
  if (hp_.arch != "llama" && hp_.arch != "qwen2") {
    *error = "unsupported architecture '" + hp_.arch + "' (supported: llama, qwen2)";
    return false;
  }
  const std::string p = hp_.arch + ".";
  auto req_int = [&](const char* key, int32_t* out) {
    auto v = f.get_int(p + key);
    if (!v || *v <= 0 || *v > (1 << 30)) {
      *error = "missing or invalid metadata " + p + key;
      return false;
    }
    *out = int32_t(*v);
    return true;
  };
  if (!req_int("embedding_length", &hp_.n_embd) || !req_int("block_count", &hp_.n_layer) ||
      !req_int("feed_forward_length", &hp_.n_ff) || !req_int("attention.head_count", &hp_.n_head))
    return false;
  hp_.n_ctx = int32_t(f.get_int(p + "context_length").value_or(2048));
  hp_.n_head_kv = int32_t(f.get_int(p + "attention.head_count_kv").value_or(hp_.n_head));
  if (hp_.n_head_kv <= 0 || hp_.n_head % hp_.n_head_kv != 0) {
    *error = "attention.head_count_kv must divide attention.head_count";
    return false;
  }
  hp_.head_dim = int32_t(f.get_int(p + "attention.key_length").value_or(hp_.n_embd / hp_.n_head));
  if (hp_.head_dim <= 0 || hp_.head_dim % 2 != 0) {
    *error = "invalid head dimension";
    return false;
  }
  hp_.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp_.rope_base = float(f.get_float(p + "rope.freq_base").value_or(10000.0));
  hp_.n_rot = int32_t(f.get_int(p + "rope.dimension_count").value_or(hp_.head_dim));
  if (hp_.n_rot <= 0 || hp_.n_rot > hp_.head_dim || hp_.n_rot % 2 != 0) {
    *error = "invalid rope.dimension_count";
    return false;
  }
  hp_.rope_neox = hp_.arch == "qwen2";
  if (!parse_rope_scaling(f, hp_.arch, hp_.n_ctx, &rope_scaling_, error)) return false;
  // rope_scale: the linear frequency scale the CUDA backend applies (YaRN: see rope_yarn).
  hp_.rope_scale = rope_scaling_.type == rope_scaling::kind::linear ? 1.0f / rope_scaling_.factor : 1.0f;
  hp_.rope_yarn = rope_scaling_.type == rope_scaling::kind::yarn;
  hp_.rope_attn_factor = rope_scaling_.attn_factor;
  return true;
}

bool llama_model::load_weights(std::string* error) {
  const gguf::file& f = *file_;
  // A matrix [n_out][n_in] (ggml dims {n_in, n_out}) of a supported type; optional ones may be absent.
  auto get = [&](const std::string& name, int64_t n_in, int64_t n_out, weight* w, bool optional = false) {
    const gguf::tensor_info* t = f.find_tensor(name);
    if (!t) {
      if (!optional) *error = "missing tensor " + name;
      return optional;
    }
    if (!gguf::is_supported(t->type)) {
      *error = "tensor " + name + " has weight type " + gguf::name_of(t->type) +
               ", which this engine does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
               "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)";
      return false;
    }
    int64_t d1 = t->dims.size() > 1 ? t->dims[1] : 1;
    bool rest_one = true;
    for (size_t i = 2; i < t->dims.size(); ++i) rest_one = rest_one && t->dims[i] == 1;
    if (t->dims.empty() || t->dims[0] != n_in || (n_out > 0 && d1 != n_out) || !rest_one) {
      *error = "tensor " + name + " has an unexpected shape";
      return false;
    }
    auto tr = gguf::traits_of(t->type);
    if (n_in % tr.block_size != 0) {
      *error = "tensor " + name + ": row length not a multiple of its block size";
      return false;
    }
    w->info = t;
    w->type = t->type;
    w->layout = store_.layout(*t);
    w->data = store_.relocate(t->data);
    w->n_in = n_in;
    w->n_out = d1;
    w->row_bytes = kernels::row_bytes(w->layout, n_in);
    return true;
  };
  auto get_vec = [&](const std::string& name, int64_t n, std::vector<float>* out, bool optional = false) {
    weight w;
    if (!get(name, n, 1, &w, optional)) return false;
    if (!w) return true;
    out->resize(size_t(n));
    dequantize_row(w.type, w.data, out->data(), n);
    return true;
  };

  const int64_t n_embd = hp_.n_embd, hd = hp_.head_dim;
  if (!get("token_embd.weight", n_embd, 0, &tok_embd_)) return false;
  hp_.n_vocab = int32_t(tok_embd_.n_out);
  if (!get("output.weight", n_embd, hp_.n_vocab, &output_, true)) return false;
  if (!output_) output_ = tok_embd_;
  if (!get_vec("output_norm.weight", n_embd, &output_norm_)) return false;

  layers_.resize(size_t(hp_.n_layer));
  for (int32_t il = 0; il < hp_.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    layer_weights& L = layers_[size_t(il)];
    const bool bias = hp_.arch == "qwen2";
    if (!get_vec(b + "attn_norm.weight", n_embd, &L.attn_norm) ||
        !get(b + "attn_q.weight", n_embd, hp_.n_head * hd, &L.wq) ||
        !get(b + "attn_k.weight", n_embd, hp_.n_head_kv * hd, &L.wk) ||
        !get(b + "attn_v.weight", n_embd, hp_.n_head_kv * hd, &L.wv) ||
        !get(b + "attn_output.weight", hp_.n_head * hd, n_embd, &L.wo) ||
        !get_vec(b + "attn_q.bias", hp_.n_head * hd, &L.bq, !bias) ||
        !get_vec(b + "attn_k.bias", hp_.n_head_kv * hd, &L.bk, !bias) ||
        !get_vec(b + "attn_v.bias", hp_.n_head_kv * hd, &L.bv, !bias) ||
        !get_vec(b + "ffn_norm.weight", n_embd, &L.ffn_norm) ||
        !get(b + "ffn_gate.weight", n_embd, hp_.n_ff, &L.w_gate) ||
        !get(b + "ffn_up.weight", n_embd, hp_.n_ff, &L.w_up) ||
        !get(b + "ffn_down.weight", hp_.n_ff, n_embd, &L.w_down))
      return false;
  }

  // RoPE angles: theta_i = pos * scale * base^(-2i/n_rot) [/ rope_freqs[i] for Llama 3.1-style scaling].
  std::vector<float> freq_factors;
  if (!get_vec("rope_freqs.weight", hp_.n_rot / 2, &freq_factors, true)) return false;
  rope_angles(rope_scaling_, hp_.n_rot, hp_.rope_base, freq_factors, &rope_inv_freq_, &rope_mscale_);
  return true;
}

std::unique_ptr<model> llama_model::create(std::shared_ptr<const gguf::file> file, int32_t n_threads,
                                           model::weights mode, std::string* error) {
  std::unique_ptr<llama_model> m(new llama_model(n_threads));
  m->file_ = std::move(file);
  if (!m->load_hparams(error)) return nullptr;
  if (mode == model::weights::compute) {
    // Matrices in the layout the CPU kernels run fastest on; the token embedding (whose rows
    // are looked up one by one, and which a tied output shares) keeps the file's.
    // AGENTQ_REPACK=0 keeps every file layout (A/B measurements).
    const char* repack = std::getenv("AGENTQ_REPACK");
    const bool allow = !(repack && std::strcmp(repack, "0") == 0);
    m->store_.load(*m->file_, [allow](const gguf::tensor_info& t) {
      const auto type = kernels::weight_type(uint32_t(t.type));
      if (!allow || t.name == "token_embd.weight" || t.dims.size() != 2) return type;
      return kernels::preferred_layout(type, t.dims[1], t.dims[0]);
    });
  }
  if (!m->load_weights(error)) return nullptr;
  return m;
}

// --- forward ----------------------------------------------------------------

// y = x / rms(x) * w, the float squares summed in double (as ggml).
// NOTE: with AVX2 in 4 double lanes (lane = element mod 4, a fixed tree), not ggml's one serial
// chain in index order: that chain was ~1 us per 768-wide row, two rows a layer.
void rms_norm_row(const float* x, const float* w, float* y, int32_t n, float eps) {
  double sum = 0.0;
  int32_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256d acc = _mm256_setzero_pd();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_mul_ps(v, v)));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) sum += double(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / n) + eps);
  for (i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// Rotates each pair (a, b) to (a c - b s, a s + b c), as fused a * c - (b * s) and
// a * s + (b * c): the scalar and AVX2 paths give the same bits.
void llama_model::rope(float* vec, int32_t n_heads, const float* cs) const {
  const int32_t hd = hp_.head_dim, n_rot = hp_.n_rot, half = n_rot / 2;
  const float* cv = cs;          // [n_rot]
  const float* sv = cs + n_rot;  // [n_rot]
  auto pair = [](float* v, int32_t i0, int32_t i1, float c, float s) {
    const float a = v[i0], b = v[i1];
    v[i0] = std::fma(a, c, -(b * s));
    v[i1] = std::fma(a, s, b * c);
  };
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = vec + size_t(h) * hd;
    int32_t i = 0;
    if (hp_.rope_neox) {  // pairs (i, i + n_rot/2)
#if defined(__AVX2__) && defined(__FMA__)
      for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 c = _mm256_loadu_ps(cv + i), s = _mm256_loadu_ps(sv + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
      }
#endif
      for (; i < half; ++i) pair(v, i, i + half, cv[i], sv[i]);
    } else {  // pairs (2i, 2i+1), 4 to a vector: the even lanes hold a, the odd lanes b
#if defined(__AVX2__) && defined(__FMA__)
      for (; 2 * i + 8 <= n_rot; i += 4) {
        const __m256 x = _mm256_loadu_ps(v + 2 * i);
        const __m256 sw = _mm256_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1));  // (b, a) per pair
        const __m256 c = _mm256_loadu_ps(cv + 2 * i), s = _mm256_loadu_ps(sv + 2 * i);
        const __m256 even = _mm256_fmsub_ps(x, c, _mm256_mul_ps(sw, s));  // a c - (b s)
        const __m256 odd = _mm256_fmadd_ps(sw, s, _mm256_mul_ps(x, c));   // a s + (b c)
        _mm256_storeu_ps(v + 2 * i, _mm256_blend_ps(even, odd, 0xAA));
      }
#endif
      for (; i < half; ++i) pair(v, 2 * i, 2 * i + 1, cv[2 * i], sv[2 * i]);
    }
  }
}

int32_t llama_model::forward(std::span<const batch_seq> seqs, kv_store& kv, float* logits) {
  const int32_t n_embd = hp_.n_embd, hd = hp_.head_dim, n_head = hp_.n_head, n_kv = hp_.n_head_kv;
  const int32_t n_q = n_head * hd, n_kvd = n_kv * hd, n_ff = hp_.n_ff, n_vocab = hp_.n_vocab;
  const kv_layout& kvl = kv.layout();
  const int32_t bs = kvl.block_size;
  // K/V rows are stored through quantize_row: a copy for F32, rounding to F16 for F16.
  const auto kv_wt = kvl.dtype == kv_dtype::f16 ? kernels::weight_type::f16 : kernels::weight_type::f32;
  const size_t kv_eb = size_t(kvl.elem_bytes());

  // Flatten the batch: row i of every activation matrix is token i of the concatenated seqs.
  int32_t n_x = 0, n_out = 0;
  for (const auto& s : seqs) {
    n_x += s.n_tokens;
    n_out += s.n_tokens == 0 ? 0 : (s.all_logits ? s.n_tokens : 1);
  }
  if (n_x == 0) return 0;
  tok_seq_.resize(size_t(n_x));
  tok_pos_.resize(size_t(n_x));
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x_, size_t(n_x) * n_embd);
  grow(xb_, size_t(n_x) * n_embd);
  grow(q_, size_t(n_x) * n_q);
  grow(k_, size_t(n_x) * n_kvd);
  grow(v_, size_t(n_x) * n_kvd);
  grow(att_, size_t(n_x) * n_q);
  grow(hb_, size_t(n_x) * n_ff);
  grow(hb2_, size_t(n_x) * n_ff);
  grow(out_rows_, size_t(n_out) * n_embd);
  float* x = x_.data();      // [n_x][n_embd] residual stream
  float* xb = xb_.data();    // [n_x][n_embd]
  float* q = q_.data();      // [n_x][n_head*hd]
  float* k = k_.data();      // [n_x][n_kv*hd]
  float* v = v_.data();      // [n_x][n_kv*hd]
  float* att = att_.data();  // [n_x][n_head*hd]
  float* hb = hb_.data();    // [n_x][n_ff]
  float* hb2 = hb2_.data();  // [n_x][n_ff]

  // NOTE: the rotation angles depend on the position only, so they are taken once per token
  // here, not per layer and per q/k (sin/cos were ~4 us of every layer of a decode step).
  const int32_t half_rot = hp_.n_rot / 2;
  const int32_t n_rot = hp_.n_rot;
  grow(rope_cs_, size_t(n_x) * 2 * size_t(n_rot));
  auto rope_row = [&](int32_t i) { return rope_cs_.data() + size_t(i) * 2 * size_t(n_rot); };
  for (int32_t si = 0, i = 0; si < int32_t(seqs.size()); ++si) {
    for (int32_t t = 0; t < seqs[size_t(si)].n_tokens; ++t, ++i) {
      tok_seq_[size_t(i)] = si;
      tok_pos_[size_t(i)] = seqs[size_t(si)].n_past + t;
      float* cv = rope_row(i);
      float* sv = cv + n_rot;
      for (int32_t j = 0; j < half_rot; ++j) {
        const float theta = float(tok_pos_[size_t(i)]) * rope_inv_freq_[size_t(j)];
        const float c = std::cos(theta) * rope_mscale_, sn = std::sin(theta) * rope_mscale_;
        const int32_t d0 = hp_.rope_neox ? j : 2 * j, d1 = hp_.rope_neox ? j + half_rot : 2 * j + 1;
        cv[d0] = cv[d1] = c;
        sv[d0] = sv[d1] = sn;
      }
      token_id id = seqs[size_t(si)].tokens[t];
      if (id < 0 || id >= n_vocab) id = 0;  // NOTE: callers validate ids; never read outside the table
      dequantize_row(tok_embd_.type, tok_embd_.row(id), x + size_t(i) * n_embd, n_embd);
    }
  }
  // Attention runs: up to k_run consecutive tokens of one sequence (positions consecutive).
  constexpr int32_t k_run = 32;
  runs_.clear();
  for (int32_t i = 0; i < n_x; ++i) {
    if (!runs_.empty() && tok_seq_[size_t(runs_.back().first)] == tok_seq_[size_t(i)] && runs_.back().second < k_run)
      ++runs_.back().second;
    else
      runs_.push_back({i, 1});
  }

  // Per token, in parallel over tokens: x += add (if given); xb = norm(x) * w (if given).
  auto add_norm = [&](const float* add, const float* w) {
    pool_.parallel_for(
        n_x,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            float* xi = x + size_t(i) * n_embd;
            if (add)
              for (int32_t j = 0; j < n_embd; ++j) xi[j] += add[size_t(i) * n_embd + size_t(j)];
            if (w) rms_norm_row(xi, w, xb + size_t(i) * n_embd, n_embd, hp_.rms_eps);
          }
        },
        std::max<int64_t>(1, 16384 / n_embd));
  };
  const float att_scale = 1.0f / std::sqrt(float(hd));
  const int32_t group = n_head / n_kv;
  for (int32_t il = 0; il < hp_.n_layer; ++il) {
    const layer_weights& L = layers_[size_t(il)];

    // attention: xb = norm(x) (fused into the previous layer's residual add); q,k,v = xb W^T (+ b);
    // rope; store k,v in the paged cache
    if (il == 0) add_norm(nullptr, L.attn_norm.data());
    {
      const weight* ws[3] = {&L.wq, &L.wk, &L.wv};
      float* ys[3] = {q, k, v};
      linear_many(pool_, ws, xb, n_x, ys);
    }
    const int64_t rows_per_chunk = std::max<int64_t>(1, 4096 / (n_q + 2 * n_kvd));
    pool_.parallel_for(
        n_x,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            float* qi = q + size_t(i) * n_q;
            float* ki = k + size_t(i) * n_kvd;
            float* vi = v + size_t(i) * n_kvd;
            if (!L.bq.empty()) {
              for (int32_t j = 0; j < n_q; ++j) qi[j] += L.bq[size_t(j)];
              for (int32_t j = 0; j < n_kvd; ++j) ki[j] += L.bk[size_t(j)];
              for (int32_t j = 0; j < n_kvd; ++j) vi[j] += L.bv[size_t(j)];
            }
            const int32_t pos = tok_pos_[size_t(i)];
            rope(qi, n_head, rope_row(int32_t(i)));
            rope(ki, n_kv, rope_row(int32_t(i)));
            const int32_t block = seqs[size_t(tok_seq_[size_t(i)])].block_table[pos / bs];
            // One head's values at a time (head-major blocks: kv_layout), rounded to F16 (if
            // so stored) once, here; every later read sees the same values.
            for (int32_t h = 0; h < n_kv; ++h) {
              const size_t o = size_t(kvl.elem_offset(pos % bs, h)) * kv_eb;
              kernels::quantize_row(kv_wt, ki + size_t(h) * hd, kv.k_bytes(il, block) + o, hd);
              kernels::quantize_row(kv_wt, vi + size_t(h) * hd, kv.v_bytes(il, block) + o, hd);
            }
          }
        },
        rows_per_chunk);

    // Causal attention per (run, head): a run is up to k_run consecutive tokens of one sequence
    // (a prefill chunk; a lone token in batched decode), whose queries for one head share one
    // packed copy of that head's K/V (attention.cpp). Each query is still computed on its own
    // over positions 0..pos in position order (attention.h), so results are batch-invariant.
    // NOTE: one query never splits its positions across threads (no batch-dependent split-K).
    const int64_t n_runs = int64_t(runs_.size());
    const int64_t items_per_chunk =
        std::max<int64_t>(1, 8192 * n_runs / (int64_t(tok_pos_[size_t(n_x - 1)] + 1) * hd * n_x));
    pool_.parallel_for(
        n_runs * n_head,
        [&](int64_t b, int64_t e) {
          thread_local std::vector<float> scores;
          for (int64_t item = b; item < e; ++item) {
            const auto [i0, n_run] = runs_[size_t(item / n_head)];
            const int32_t h = int32_t(item % n_head);
            const int32_t pos0 = tok_pos_[size_t(i0)];
            if (scores.size() < size_t(pos0 + n_run)) scores.resize(size_t(pos0 + n_run));
            attention_args a;
            a.kv = &kv;
            a.layer = il;
            a.block_table = seqs[size_t(tok_seq_[size_t(i0)])].block_table;
            a.block_size = bs;
            a.token_stride = kvl.token_stride();
            a.head_offset = int32_t(kvl.elem_offset(0, h / group));
            a.head_dim = hd;
            a.scale = att_scale;
            attend(a, q + size_t(i0) * n_q + size_t(h) * hd, n_q, pos0, n_run, att + size_t(i0) * n_q + size_t(h) * hd,
                   n_q, scores.data());
          }
        },
        items_per_chunk);
    linear(pool_, L.wo, att, n_x, xb);
    add_norm(xb, L.ffn_norm.data());  // x += xb; xb = norm(x)

    // SwiGLU feed-forward: x += W_down (silu(W_gate xb) * W_up xb)
    {
      const weight* ws[2] = {&L.w_gate, &L.w_up};
      float* ys[2] = {hb, hb2};
      linear_many(pool_, ws, xb, n_x, ys);
    }
    pool_.parallel_for(
        n_x,
        [&](int64_t b, int64_t e) {
          kernels::silu_mul(hb + size_t(b) * n_ff, hb2 + size_t(b) * n_ff, hb + size_t(b) * n_ff, (e - b) * n_ff);
        },
        std::max<int64_t>(1, 8192 / n_ff));
    linear(pool_, L.w_down, hb, n_x, xb);
    add_norm(xb, il + 1 < hp_.n_layer ? layers_[size_t(il + 1)].attn_norm.data() : nullptr);
  }

  // Final norm on the rows that need logits, then the vocabulary projection.
  float* rows = out_rows_.data();  // [n_out][n_embd]
  int32_t r = 0;
  for (int32_t si = 0, i0 = 0; si < int32_t(seqs.size()); ++si) {
    const batch_seq& s = seqs[size_t(si)];
    for (int32_t t = s.all_logits ? 0 : s.n_tokens - 1; t >= 0 && t < s.n_tokens; ++t, ++r)
      rms_norm_row(x + size_t(i0 + t) * n_embd, output_norm_.data(), rows + size_t(r) * n_embd, n_embd, hp_.rms_eps);
    i0 += s.n_tokens;
  }
  linear(pool_, output_, rows, n_out, logits);
  return n_out;
}

}  // namespace

std::unique_ptr<model> model::load(std::shared_ptr<const gguf::file> file, int32_t n_threads, std::string* error,
                                   weights mode) {
  if (!file) {
    *error = "no model file";
    return nullptr;
  }
  return llama_model::create(std::move(file), n_threads, mode, error);
}

}  // namespace agentq
