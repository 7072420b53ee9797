// The shared transformer forward pass on the CPU over a layer_stack (transformer.h): GQA
// attention with options (biases, per-head Q/K RMSNorm, NoPE layers, per-layer RoPE sets,
// sliding windows, score soft-capping, sinks), post-norms, SwiGLU / GeGLU / fused gate-up / MoE FFNs.
// K/V live in the paged kv_store, reached through each sequence's block table.
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
#include "model/moe.h"
#include "model/transformer.h"
#include "util/thread_pool.h"

namespace agentq {

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

namespace {

// GELU (tanh form) as llama.cpp's CPU backend computes it: x rounded to F16 and looked up in a
// table of gelu(h) rounded to F16, exact beyond |x| >= 10 (ggml's GGML_GELU_FP16).
// NOTE: the F16 table is on purpose: it is what the reference does, and the rounding it adds
// (~1e-3 relative) would otherwise be a systematic difference in every Gemma layer.
class gelu_table {
 public:
  gelu_table() : t_(size_t(1) << 16) {
    for (uint32_t i = 0; i < (1u << 16); ++i) {
      const float x = kernels::fp16_to_fp32(uint16_t(i));
      const float g = 0.5f * x * (1.0f + std::tanh(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
      t_[i] = kernels::fp16_to_fp32(kernels::fp32_to_fp16(g));
    }
  }
  // y = gelu(gate) * up; y may alias either input.
  void gelu_mul(const float* gate, const float* up, float* y, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      const float x = gate[i];
      const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : t_[kernels::fp32_to_fp16(x)];
      y[i] = g * up[i];
    }
  }

 private:
  std::vector<float> t_;
};

const gelu_table& gelu() {
  static const gelu_table t;
  return t;
}

class transformer final : public model {
 public:
  transformer(std::shared_ptr<const gguf::file> file, std::unique_ptr<weight_store> store, layer_stack d,
              int32_t n_threads)
      : file_(std::move(file)), store_(std::move(store)), d_(std::move(d)), hp_(d_.hp), pool_(n_threads) {}

  const model_hparams& hparams() const override { return hp_; }
  int32_t forward(std::span<const batch_seq> seqs, kv_store& kv, float* logits) override;

 private:
  void rope(float* vec, int32_t n_heads, const float* cs) const;  // cs: one token's rope_cs_ row
  // runs_ over the first n_x rows of tok_seq_ (attention runs: consecutive tokens of one sequence).
  void build_runs(int32_t n_x);
  // Move the rows that need logits (each seq's last token, every token of an all_logits one) to
  // the front of x [n_x][n_embd] and q [n_x][n_q], with their tok_seq_ / tok_pos_, in order; the
  // new row count (the caller's n_out). Rebuilds runs_.
  int32_t keep_output_rows(std::span<const batch_seq> seqs, float* x, float* q, int32_t n_embd, int32_t n_q);

  std::shared_ptr<const gguf::file> file_;
  std::unique_ptr<weight_store> store_;  // the tensor data on huge pages (weights point into it)
  layer_stack d_;
  const model_hparams& hp_;
  thread_pool pool_;
  moe_scratch moe_;

  // Scratch, grown on demand. NOTE: forward() is not reentrant (one engine thread calls it).
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, out_rows_, fused_;
  // [n_sets][n_x][cos, sin][n_rot]: each token's rotation per RoPE set, once per forward; entry d
  // holds the angle of the pair that dim d belongs to (both dims of a pair), so rope() reads
  // them as vectors.
  std::vector<float> rope_cs_;
  std::vector<int32_t> tok_seq_, tok_pos_;
  std::vector<std::pair<int32_t, int32_t>> runs_;  // attention runs: (first token, count)
};

// --- forward ----------------------------------------------------------------

// Rotates each pair (a, b) to (a c - b s, a s + b c), as fused a * c - (b * s) and
// a * s + (b * c): the scalar and AVX2 paths give the same bits.
void transformer::rope(float* vec, int32_t n_heads, const float* cs) const {
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


void transformer::build_runs(int32_t n_x) {
  // Attention runs: up to k_run consecutive tokens of one sequence (positions consecutive).
  constexpr int32_t k_run = 32;
  runs_.clear();
  for (int32_t i = 0; i < n_x; ++i) {
    if (!runs_.empty() && tok_seq_[size_t(runs_.back().first)] == tok_seq_[size_t(i)] && runs_.back().second < k_run)
      ++runs_.back().second;
    else
      runs_.push_back({i, 1});
  }
}

int32_t transformer::keep_output_rows(std::span<const batch_seq> seqs, float* x, float* q, int32_t n_embd,
                                      int32_t n_q) {
  int32_t r = 0;  // NOTE: r <= i always, so moving rows forward in order never overwrites one still to move
  for (int32_t si = 0, i0 = 0; si < int32_t(seqs.size()); ++si) {
    const batch_seq& s = seqs[size_t(si)];
    for (int32_t t = s.all_logits ? 0 : s.n_tokens - 1; t >= 0 && t < s.n_tokens; ++t, ++r) {
      const int32_t i = i0 + t;
      if (i == r) continue;
      std::memcpy(x + size_t(r) * n_embd, x + size_t(i) * n_embd, sizeof(float) * size_t(n_embd));
      std::memcpy(q + size_t(r) * n_q, q + size_t(i) * n_q, sizeof(float) * size_t(n_q));
      tok_seq_[size_t(r)] = tok_seq_[size_t(i)];
      tok_pos_[size_t(r)] = tok_pos_[size_t(i)];
    }
    i0 += s.n_tokens;
  }
  build_runs(r);
  return r;
}

int32_t transformer::forward(std::span<const batch_seq> seqs, kv_store& kv, float* logits) {
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
  const int32_t n_ffw = std::max(n_ff, d_.n_ff_exp);  // widest FFN hidden row
  grow(x_, size_t(n_x) * n_embd);
  grow(xb_, size_t(n_x) * n_embd);
  grow(q_, size_t(n_x) * n_q);
  grow(k_, size_t(n_x) * n_kvd);
  grow(v_, size_t(n_x) * n_kvd);
  grow(att_, size_t(n_x) * n_q);
  grow(hb_, size_t(n_x) * n_ffw);
  grow(hb2_, size_t(n_x) * n_ffw);
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
  // (and RoPE set) here, not per layer and per q/k (sin/cos were ~4 us of every layer of a decode step).
  const int32_t half_rot = hp_.n_rot / 2;
  const int32_t n_rot = hp_.n_rot;
  const int32_t n_sets = int32_t(d_.rope_inv_freq.size());
  const size_t set_stride = size_t(n_x) * 2 * size_t(n_rot);
  grow(rope_cs_, size_t(n_sets) * set_stride);
  auto rope_row = [&](int32_t set, int32_t i) {
    return rope_cs_.data() + size_t(set) * set_stride + size_t(i) * 2 * size_t(n_rot);
  };
  const float mscale = d_.rope_mscale;
  for (int32_t si = 0, i = 0; si < int32_t(seqs.size()); ++si) {
    for (int32_t t = 0; t < seqs[size_t(si)].n_tokens; ++t, ++i) {
      tok_seq_[size_t(i)] = si;
      tok_pos_[size_t(i)] = seqs[size_t(si)].n_past + t;
      for (int32_t set = 0; set < n_sets; ++set) {
        float* cv = rope_row(set, i);
        float* sv = cv + n_rot;
        const std::vector<float>& inv_freq = d_.rope_inv_freq[size_t(set)];
        for (int32_t j = 0; j < half_rot; ++j) {
          const float theta = float(tok_pos_[size_t(i)]) * inv_freq[size_t(j)];
          const float c = std::cos(theta) * mscale, sn = std::sin(theta) * mscale;
          const int32_t d0 = hp_.rope_neox ? j : 2 * j, d1 = hp_.rope_neox ? j + half_rot : 2 * j + 1;
          cv[d0] = cv[d1] = c;
          sv[d0] = sv[d1] = sn;
        }
      }
      token_id id = seqs[size_t(si)].tokens[t];
      if (id < 0 || id >= n_vocab) id = 0;  // NOTE: callers validate ids; never read outside the table
      float* xi = x + size_t(i) * n_embd;
      dequantize_row(d_.tok_embd.type, d_.tok_embd.row(id), xi, n_embd);
      if (d_.embd_scale != 0.0f)
        for (int32_t j = 0; j < n_embd; ++j) xi[j] *= d_.embd_scale;
    }
  }
  build_runs(n_x);
  bool trimmed = false;  // the last layer runs on the n_out rows that need logits only

  // Per token, in parallel over tokens: add = norm(add) * add_w (if given); x += add (if
  // given); xb = norm(x) * w (if given).
  auto add_norm = [&](float* add, const std::vector<float>* add_w, const float* w) {
    pool_.parallel_for(
        n_x,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            float* xi = x + size_t(i) * n_embd;
            if (add) {
              float* ai = add + size_t(i) * n_embd;
              if (add_w && !add_w->empty()) rms_norm_row(ai, add_w->data(), ai, n_embd, hp_.rms_eps);
              for (int32_t j = 0; j < n_embd; ++j) xi[j] += ai[j];
            }
            if (w) rms_norm_row(xi, w, xb + size_t(i) * n_embd, n_embd, hp_.rms_eps);
          }
        },
        std::max<int64_t>(1, 16384 / n_embd));
  };
  const float att_scale = d_.q_scale != 0.0f ? 1.0f : 1.0f / std::sqrt(float(hd));
  const int32_t group = n_head / n_kv;
  for (int32_t il = 0; il < hp_.n_layer; ++il) {
    const layer_desc& L = d_.layers[size_t(il)];

    // attention: xb = norm(x) (fused into the previous layer's residual add); q,k,v = xb W^T (+ b);
    // [per-head q/k norm]; rope; store k,v in the paged cache
    if (il == 0) add_norm(nullptr, nullptr, L.attn_norm.data());
    if (L.wqkv) {
      const int32_t n_qkv = n_q + 2 * n_kvd;
      grow(fused_, size_t(n_x) * n_qkv);
      linear(pool_, L.wqkv, xb, n_x, fused_.data());
      for (int32_t i = 0; i < n_x; ++i) {
        const float* r = fused_.data() + size_t(i) * n_qkv;
        std::memcpy(q + size_t(i) * n_q, r, sizeof(float) * size_t(n_q));
        std::memcpy(k + size_t(i) * n_kvd, r + n_q, sizeof(float) * size_t(n_kvd));
        std::memcpy(v + size_t(i) * n_kvd, r + n_q + n_kvd, sizeof(float) * size_t(n_kvd));
      }
    } else {
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
            if (!L.q_norm.empty()) {
              for (int32_t h = 0; h < n_head; ++h) rms_norm_row(qi + h * hd, L.q_norm.data(), qi + h * hd, hd, hp_.rms_eps);
              for (int32_t h = 0; h < n_kv; ++h) rms_norm_row(ki + h * hd, L.k_norm.data(), ki + h * hd, hd, hp_.rms_eps);
            }
            const int32_t pos = tok_pos_[size_t(i)];
            if (L.use_rope) {
              rope(qi, n_head, rope_row(L.rope_set, int32_t(i)));
              rope(ki, n_kv, rope_row(L.rope_set, int32_t(i)));
            }
            if (d_.q_scale != 0.0f)
              for (int32_t j = 0; j < n_q; ++j) qi[j] *= d_.q_scale;
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

    // NOTE: the last layer's K/V are stored for every token above (later tokens attend to them),
    // but its attention output and FFN reach only the logits: rows that need none stop here
    // (llama.cpp's inp_out_ids). The kept rows get the same bits: every op below is per row.
    if (il == hp_.n_layer - 1 && n_out < n_x) {
      n_x = keep_output_rows(seqs, x, q, n_embd, n_q);
      trimmed = true;
    }

    // Causal attention per (run, head): a run is up to k_run consecutive tokens of one sequence
    // (a prefill chunk; a lone token in batched decode), whose queries for one head share one
    // packed copy of that head's K/V (attention.cpp). Each query is still computed on its own
    // over positions 0..pos in position order (attention.h), so results are batch-invariant.
    // NOTE: one query never splits its positions across threads (no batch-dependent split-K).
    // A lone token's heads go two at a time where two neighbours share a K/V head (GQA,
    // attend_head_pair: the same bits as one at a time, each K/V row read once for both); chunks
    // are then even so a chunk starts at an even head.
    const int64_t n_runs = int64_t(runs_.size());
    const bool pair_heads = group % 2 == 0;
    int64_t items_per_chunk =
        std::max<int64_t>(1, 8192 * n_runs / (int64_t(tok_pos_[size_t(n_x - 1)] + 1) * hd * n_x));
    if (pair_heads) items_per_chunk += items_per_chunk % 2;
    pool_.parallel_for(
        n_runs * n_head,
        [&](int64_t b, int64_t e) {
          thread_local std::vector<float> scores;
          for (int64_t item = b; item < e; ++item) {
            // NOTE: not a structured binding: args_of below captures i0, which clang 14 (the fuzz
            // build, scripts/fuzz.sh) refuses for a binding
            const int32_t i0 = runs_[size_t(item / n_head)].first, n_run = runs_[size_t(item / n_head)].second;
            const int32_t h = int32_t(item % n_head);
            const int32_t pos0 = tok_pos_[size_t(i0)];
            if (scores.size() < size_t(pos0 + n_run)) scores.resize(size_t(pos0 + n_run));
            auto args_of = [&](int32_t head) {
              attention_args a;
              a.kv = &kv;
              a.layer = il;
              a.block_table = seqs[size_t(tok_seq_[size_t(i0)])].block_table;
              a.block_size = bs;
              a.token_stride = kvl.token_stride();
              a.head_offset = int32_t(kvl.elem_offset(0, head / group));
              a.head_dim = hd;
              a.scale = att_scale;
              a.window = L.window;
              a.softcap = d_.attn_softcap;
              if (!L.sinks.empty()) {
                a.has_sink = true;
                a.sink = L.sinks[size_t(head)];
              }
              return a;
            };
            const attention_args a = args_of(h);
            const float* qh = q + size_t(i0) * n_q + size_t(h) * hd;
            float* oh = att + size_t(i0) * n_q + size_t(h) * hd;
            if (pair_heads && n_run == 1 && h % 2 == 0 && item + 1 < e) {
              attend_head_pair(a, args_of(h + 1), qh, qh + hd, pos0, oh, oh + hd, scores.data());
              ++item;
              continue;
            }
            attend(a, qh, n_q, pos0, n_run, oh, n_q, scores.data());
          }
        },
        items_per_chunk);
    linear(pool_, L.wo, att, n_x, xb);
    if (!L.bo.empty())
      for (int32_t i = 0; i < n_x; ++i)
        for (int32_t j = 0; j < n_embd; ++j) xb[size_t(i) * n_embd + j] += L.bo[size_t(j)];
    add_norm(xb, &L.attn_post_norm, L.ffn_norm.data());  // [xb = norm(xb)]; x += xb; xb = norm(x)

    // Feed-forward: x += W_down (act(W_gate xb) * W_up xb), or the mixture of experts.
    if (L.moe_router) {
      moe_ffn(pool_, d_, L, xb, n_x, xb, moe_);
    } else {
      if (L.w_gate_up) {  // fused: gate rows first, then up rows
        grow(fused_, size_t(n_x) * 2 * n_ff);
        linear(pool_, L.w_gate_up, xb, n_x, fused_.data());
        for (int32_t i = 0; i < n_x; ++i) {
          const float* r = fused_.data() + size_t(i) * 2 * n_ff;
          std::memcpy(hb + size_t(i) * n_ff, r, sizeof(float) * size_t(n_ff));
          std::memcpy(hb2 + size_t(i) * n_ff, r + n_ff, sizeof(float) * size_t(n_ff));
        }
      } else {
        const weight* ws[2] = {&L.w_gate, &L.w_up};
        float* ys[2] = {hb, hb2};
        linear_many(pool_, ws, xb, n_x, ys);
      }
      pool_.parallel_for(
          n_x,
          [&](int64_t b, int64_t e) {
            float* g = hb + size_t(b) * n_ff;
            if (d_.act == ffn_act::gelu_tanh)
              gelu().gelu_mul(g, hb2 + size_t(b) * n_ff, g, (e - b) * n_ff);
            else
              kernels::silu_mul(g, hb2 + size_t(b) * n_ff, g, (e - b) * n_ff);
          },
          std::max<int64_t>(1, 8192 / n_ff));
      linear(pool_, L.w_down, hb, n_x, xb);
    }
    add_norm(xb, &L.ffn_post_norm, il + 1 < hp_.n_layer ? d_.layers[size_t(il + 1)].attn_norm.data() : nullptr);
  }

  // Final norm on the rows that need logits, then the vocabulary projection.
  float* rows = out_rows_.data();  // [n_out][n_embd]
  int32_t r = 0;
  if (trimmed) {  // x's first n_out rows are those rows, in order
    for (; r < n_out; ++r)
      rms_norm_row(x + size_t(r) * n_embd, d_.output_norm.data(), rows + size_t(r) * n_embd, n_embd, hp_.rms_eps);
  }
  for (int32_t si = 0, i0 = 0; !trimmed && si < int32_t(seqs.size()); ++si) {
    const batch_seq& s = seqs[size_t(si)];
    for (int32_t t = s.all_logits ? 0 : s.n_tokens - 1; t >= 0 && t < s.n_tokens; ++t, ++r)
      rms_norm_row(x + size_t(i0 + t) * n_embd, d_.output_norm.data(), rows + size_t(r) * n_embd, n_embd, hp_.rms_eps);
    i0 += s.n_tokens;
  }
  linear(pool_, d_.output, rows, n_out, logits);
  if (d_.final_softcap != 0.0f) {
    const float cap = d_.final_softcap, inv = 1.0f / cap;
    const int64_t n = int64_t(n_out) * n_vocab;
    for (int64_t i = 0; i < n; ++i) logits[i] = std::tanh(logits[i] * inv) * cap;
  }
  return n_out;
}

}  // namespace

std::unique_ptr<model> make_transformer(std::shared_ptr<const gguf::file> file, std::unique_ptr<weight_store> store,
                                        layer_stack desc, int32_t n_threads) {
  return std::make_unique<transformer>(std::move(file), std::move(store), std::move(desc), n_threads);
}

}  // namespace agentq
