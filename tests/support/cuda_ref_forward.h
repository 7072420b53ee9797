// The CUDA forward pass's sequence of ops (backend/cuda_forward.cpp's launch_step) run on the CPU
// with the kernels' plain C++ references (kernels/cuda/*.cpp) over a model's layer_stack, one
// sequence at a time: unit.cuda_reference_forward checks it against the CPU engine; the gpu tests
// check the device against it where the CPU engine's own rounding differs (gpt-oss's MXFP4
// activations, rounded to Q8_0 on the CPU only).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "model/transformer.h"

namespace agentq::test::cuda_ref {

namespace ref = agentq::kernels::ref;
namespace cu = agentq::kernels::cuda;

// A matrix as the CUDA pass sees it: the file's bytes, type and shape (a row view for fused tensors).
struct mat {
  cu::weight_type type = cu::weight_type::f32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  mat rows(int64_t first, int64_t n) const {
    mat v = *this;
    v.data = data + size_t(first) * cu::row_bytes(type, n_in);
    v.n_out = n;
    return v;
  }
};
mat view(const weight& w) {
  return w ? mat{static_cast<cu::weight_type>(static_cast<int32_t>(w.type)), w.data, w.n_in, w.n_out} : mat{};
}
void linear(const mat& w, const float* x, int32_t n_x, float* y) {
  ref::matvec(w.type, w.data, w.n_out, w.n_in, x, n_x, y);
}
const float* ptr(const std::vector<float>& v) {
  return v.empty() ? nullptr : v.data();
}

// The ops of cuda_forward's launch_step over one sequence's new tokens (positions n_past..), K/V in
// host blocks laid out as the device's ([layer][block][block_size][n_kv * hd], F32, contiguous table).
class ref_forward {
 public:
  ref_forward(const layer_stack& d, int32_t n_blocks, int32_t block_size = 16)
      : d_(d), n_blocks_(n_blocks), block_size_(block_size) {
    const auto& hp = d.hp;
    block_floats_ = int64_t(block_size_) * hp.n_head_kv * hp.head_dim;
    kc_.assign(size_t(hp.n_layer) * n_blocks * block_floats_, 0.0f);
    vc_ = kc_;
    for (int32_t i = 0; i < n_blocks; ++i) table_.push_back(i);
  }

  // Windowed KV as the CUDA backend holds it: kc_/vc_ become one pool of n_pages pages (one layer's
  // block each), read and written through a block table and the (block, layer) -> page map
  // forward() is given.
  void use_pages(int32_t n_pages) {
    kc_.assign(size_t(n_pages) * block_floats_, 0.0f);
    vc_ = kc_;
    paged_ = true;
  }

  // Logits of the last new token (all_rows: of every new token). table: the sequence's block ids (default: 0, 1, 2,
  // ...); page_map: windowed KV's [block][layer] pages (after use_pages).
  std::vector<float> forward(const std::vector<token_id>& tokens, int32_t n_past,
                             const std::vector<int32_t>* table = nullptr, const int32_t* page_map = nullptr,
                             bool all_rows = false) {
    const int32_t* tab = table ? table->data() : table_.data();
    const int32_t max_blocks = table ? int32_t(table->size()) : n_blocks_;
    const auto& hp = d_.hp;
    const int32_t n_x = int32_t(tokens.size()), n_embd = hp.n_embd, hd = hp.head_dim, n_head = hp.n_head,
                  n_kv = hp.n_head_kv, n_q = n_head * hd, n_kvd = n_kv * hd, n_ff = hp.n_ff;
    const int32_t k_used = d_.n_expert_used, n_exp = d_.n_expert, n_ff_e = d_.n_ff_exp, n_moe = n_x * k_used;
    std::vector<int32_t> ids(tokens.begin(), tokens.end()), pos, tok_seq(size_t(n_x), 0);
    for (int32_t t = 0; t < n_x; ++t) pos.push_back(n_past + t);
    std::vector<float> x(size_t(n_x) * n_embd), xb(x.size()), q(size_t(n_x) * n_q), k(size_t(n_x) * n_kvd), v(k.size()),
        att(q.size()), hb(size_t(n_x) * std::max(n_ff, 1)), hb2(hb.size());
    const mat tok_embd = view(d_.tok_embd);
    ref::embedding(tok_embd.type, tok_embd.data, ids.data(), n_x, n_embd, x.data());
    if (d_.embd_scale != 0.0f) ref::scale(x.data(), d_.embd_scale, int64_t(n_x) * n_embd);
    const float att_scale = d_.q_scale != 0.0f ? 1.0f : 1.0f / std::sqrt(float(hd));
    const auto gating =
        d_.gating == moe_gating::softmax_topk ? cu::moe_gating::topk_softmax : cu::moe_gating::softmax_norm;
    // x += [post](W a [+ b]), as cuda_forward::residual_out
    auto residual_out = [&](const mat& w, const std::vector<float>& b, const std::vector<float>& post, const float* a) {
      std::vector<float> tmp(size_t(n_x) * w.n_out);
      linear(w, a, n_x, tmp.data());
      if (!b.empty()) ref::add_rows(tmp.data(), b.data(), n_x, int32_t(w.n_out));
      if (!post.empty()) ref::rms_norm(tmp.data(), post.data(), tmp.data(), n_x, int32_t(w.n_out), hp.rms_eps);
      ref::add(x.data(), tmp.data(), int64_t(tmp.size()));
    };
    for (int32_t il = 0; il < hp.n_layer; ++il) {
      const layer_desc& L = d_.layers[size_t(il)];
      float* k_cache = kc_.data() + (paged_ ? 0 : size_t(il) * n_blocks_ * block_floats_);
      float* v_cache = vc_.data() + (paged_ ? 0 : size_t(il) * n_blocks_ * block_floats_);
      const cu::kv_page_map pages = paged_ ? cu::kv_page_map{page_map, hp.n_layer, il} : cu::kv_page_map{};
      ref::rms_norm(x.data(), L.attn_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
      mat wq = view(L.wq), wk = view(L.wk), wv = view(L.wv);
      if (L.wqkv) {
        const mat qkv = view(L.wqkv);
        wq = qkv.rows(0, n_q), wk = qkv.rows(n_q, n_kvd), wv = qkv.rows(n_q + n_kvd, n_kvd);
      }
      linear(wq, xb.data(), n_x, q.data());
      linear(wk, xb.data(), n_x, k.data());
      linear(wv, xb.data(), n_x, v.data());
      if (!L.bq.empty()) {
        ref::add_rows(q.data(), L.bq.data(), n_x, n_q);
        ref::add_rows(k.data(), L.bk.data(), n_x, n_kvd);
        ref::add_rows(v.data(), L.bv.data(), n_x, n_kvd);
      }
      if (!L.q_norm.empty()) {
        ref::rms_norm(q.data(), L.q_norm.data(), q.data(), n_x * n_head, hd, hp.rms_eps);
        ref::rms_norm(k.data(), L.k_norm.data(), k.data(), n_x * n_kv, hd, hp.rms_eps);
      }
      const float* inv_freq = L.use_rope ? d_.rope_inv_freq[size_t(L.rope_set)].data() : nullptr;
      ref::rope_kv_write_table(q.data(), k.data(), v.data(), pos.data(), tok_seq.data(), tab, max_blocks, n_x, n_head,
                               n_kv, hd, hp.n_rot, hp.rope_neox, inv_freq, d_.rope_mscale, block_size_, k_cache,
                               v_cache, pages);
      if (d_.q_scale != 0.0f) ref::scale(q.data(), d_.q_scale, int64_t(n_x) * n_q);
      const cu::attention_options ao{L.window, d_.attn_softcap, ptr(L.sinks), pages};
      if (n_x == 1) {
        const int32_t len = n_past + 1;
        ref::attention_decode(q.data(), k_cache, v_cache, tab, max_blocks, &len, 1, n_head, n_kv, hd, block_size_,
                              att_scale, att.data(), ao);
      } else {
        const int32_t q_start[2] = {0, n_x};
        ref::attention_prefill(q.data(), k_cache, v_cache, tab, max_blocks, q_start, &n_past, 1, n_head, n_kv, hd,
                               block_size_, att_scale, att.data(), ao);
      }
      residual_out(view(L.wo), L.bo, L.attn_post_norm, att.data());

      ref::rms_norm(x.data(), L.ffn_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
      if (L.moe_router) {
        std::vector<float> router(size_t(n_x) * n_exp), w(static_cast<size_t>(n_moe)), g(size_t(n_moe) * n_ff_e),
            u(g.size()), y(size_t(n_moe) * n_embd);
        std::vector<int32_t> sel(static_cast<size_t>(n_moe));
        linear(view(L.moe_router), xb.data(), n_x, router.data());
        if (!L.moe_router_b.empty()) ref::add_rows(router.data(), L.moe_router_b.data(), n_x, n_exp);
        ref::moe_topk(router.data(), n_x, n_exp, k_used, gating, sel.data(), w.data());
        const mat gs = view(L.moe_gate), us = view(L.moe_up), ds = view(L.moe_down);
        // As the pass: more than one token runs the rows grouped by expert (moe_group's chunks,
        // 8 rows each as the kernel's); rows start as NaN, so a row the grouping missed shows.
        std::vector<int32_t> order(static_cast<size_t>(n_moe)), chunks(1 + 3 * size_t(n_moe + n_exp));
        if (n_x > 1) ref::moe_group(sel.data(), n_moe, n_exp, 8, order.data(), chunks.data());
        auto moe_rows = [&](const mat& m, int64_t n_o, int64_t n_i, const float* in, int32_t x_div, float* out) {
          if (n_x == 1) return ref::moe_matvec(m.type, m.data, n_o, n_i, in, x_div, sel.data(), n_moe, out);
          std::fill(out, out + n_moe * n_o, NAN);
          const size_t rb = cu::row_bytes(m.type, n_i);
          for (int32_t c = 0; c < chunks[0]; ++c)
            for (int32_t j = 0; j < chunks[size_t(3 + 3 * c)]; ++j) {
              const int32_t e = chunks[size_t(1 + 3 * c)], r = order[size_t(chunks[size_t(2 + 3 * c)] + j)];
              ref::matvec(m.type, m.data + size_t(e) * size_t(n_o) * rb, n_o, n_i, in + int64_t(r / x_div) * n_i, 1,
                          out + int64_t(r) * n_o);
            }
        };
        moe_rows(gs, n_ff_e, n_embd, xb.data(), k_used, g.data());
        moe_rows(us, n_ff_e, n_embd, xb.data(), k_used, u.data());
        if (!L.moe_gate_b.empty()) {
          ref::add_rows_by_id(g.data(), L.moe_gate_b.data(), sel.data(), n_moe, n_ff_e);
          ref::add_rows_by_id(u.data(), L.moe_up_b.data(), sel.data(), n_moe, n_ff_e);
        }
        if (d_.moe_act == ffn_act::swiglu_oai)
          ref::swiglu_oai(g.data(), u.data(), g.data(), int64_t(g.size()));
        else
          ref::swiglu(g.data(), u.data(), g.data(), int64_t(g.size()));
        moe_rows(ds, n_embd, n_ff_e, g.data(), 1, y.data());
        if (!L.moe_down_b.empty()) ref::add_rows_by_id(y.data(), L.moe_down_b.data(), sel.data(), n_moe, n_embd);
        ref::moe_combine(y.data(), w.data(), n_x, k_used, n_embd, xb.data());
        if (!L.ffn_post_norm.empty())
          ref::rms_norm(xb.data(), L.ffn_post_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
        ref::add(x.data(), xb.data(), int64_t(xb.size()));
        continue;
      }
      mat wg = view(L.w_gate), wu = view(L.w_up);
      if (L.w_gate_up) {
        const mat gu = view(L.w_gate_up);
        wg = gu.rows(0, n_ff), wu = gu.rows(n_ff, n_ff);
      }
      linear(wg, xb.data(), n_x, hb.data());
      linear(wu, xb.data(), n_x, hb2.data());
      if (d_.act == ffn_act::gelu_tanh)
        ref::gelu_mul(hb.data(), hb2.data(), hb.data(), int64_t(n_x) * n_ff);
      else
        ref::swiglu(hb.data(), hb2.data(), hb.data(), int64_t(n_x) * n_ff);
      residual_out(view(L.w_down), {}, L.ffn_post_norm, hb.data());
    }
    // The last token's logits, or (all_rows) every new token's, row after row.
    const int32_t first = all_rows ? 0 : n_x - 1, n_rows = n_x - first;
    std::vector<float> row(size_t(n_rows) * n_embd), logits(size_t(n_rows) * hp.n_vocab);
    ref::rms_norm(x.data() + size_t(first) * n_embd, d_.output_norm.data(), row.data(), n_rows, n_embd, hp.rms_eps);
    linear(view(d_.output), row.data(), n_rows, logits.data());
    if (d_.final_softcap != 0.0f) ref::softcap(logits.data(), d_.final_softcap, int64_t(n_rows) * hp.n_vocab);
    return logits;
  }

 private:
  const layer_stack& d_;
  int32_t n_blocks_;
  int32_t block_size_;
  int64_t block_floats_ = 0;
  std::vector<float> kc_, vc_;
  std::vector<int32_t> table_;
  bool paged_ = false;
};

}  // namespace agentq::test::cuda_ref
