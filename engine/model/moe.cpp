// The mixture-of-experts FFN (moe.h), as llama.cpp's build_moe_ffn: softmax gating with
// normalised top-k weights (Qwen3-MoE) or softmax over the top-k logits with biases and the
// clamped SwiGLU (GPT-OSS); experts are views into the stacked expert tensors.
#include "model/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>

#include "agentq/kernels.h"
#include "util/thread_pool.h"

namespace agentq {

namespace {

// Rows [e * n_rows, (e + 1) * n_rows) of a stacked expert tensor as one matrix.
// NOTE: stacked tensors keep the file's layout (model::load repacks 2-d matrices only), so
// their rows are contiguous and can be sliced.
weight expert_view(const weight& stack, int64_t n_rows, int32_t e) {
  weight w = stack;
  w.data = stack.data + size_t(e) * size_t(n_rows) * stack.row_bytes;
  w.n_out = n_rows;
  return w;
}

std::atomic<uint64_t> g_expert_bytes{0};

void add_bias(float* y, const float* b, int32_t n) {
  for (int32_t j = 0; j < n; ++j) y[j] += b[j];
}

// GPT-OSS's clamped SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7, as llama.cpp fixes them):
// y = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1). y may alias g or u.
void swiglu_oai(const float* g, const float* u, float* y, int64_t n) {
  constexpr float alpha = 1.702f, limit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit);
    const float up = std::clamp(u[i], -limit, limit);
    y[i] = x / (1.0f + std::exp(alpha * (-x))) * (up + 1.0f);
  }
}

}  // namespace

uint64_t moe_expert_bytes_read() { return g_expert_bytes.load(std::memory_order_relaxed); }

void moe_ffn(thread_pool& pool, const layer_stack& d, const layer_desc& L, const float* x, int32_t n_x, float* out,
             moe_scratch& s) {
  const int32_t n_embd = d.hp.n_embd, n_exp = d.n_expert, k = d.n_expert_used, n_ff = d.n_ff_exp;
  s.router.resize(size_t(n_x) * n_exp);
  s.sel.resize(size_t(n_x) * k);
  s.w.resize(size_t(n_x) * k);
  s.out.resize(size_t(n_x) * k * n_embd);
  linear(pool, L.moe_router, x, n_x, s.router.data());
  if (!L.moe_router_b.empty())
    for (int32_t i = 0; i < n_x; ++i) add_bias(s.router.data() + size_t(i) * n_exp, L.moe_router_b.data(), n_exp);

  std::vector<int32_t> order(static_cast<size_t>(n_exp));
  if (d.gating == moe_gating::softmax_topk) {
    // gpt-oss: the k largest router logits (ties: lower id), a softmax over those k alone
    // (llama.cpp's SOFTMAX_WEIGHT gating), no renormalisation.
    for (int32_t i = 0; i < n_x; ++i) {
      const float* p = s.router.data() + size_t(i) * n_exp;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
      float* w = s.w.data() + size_t(i) * k;
      const float mx = p[order[0]];
      double sum = 0;
      for (int32_t j = 0; j < k; ++j) {
        s.sel[size_t(i) * k + size_t(j)] = order[size_t(j)];
        w[j] = std::exp(p[order[size_t(j)]] - mx);
        sum += double(w[j]);
      }
      const float inv = float(1.0 / sum);
      for (int32_t j = 0; j < k; ++j) w[j] *= inv;
    }
  }
  // Routing (qwen3moe): softmax over the experts (ggml_soft_max: max-shifted exp, sum in double),
  // the k most probable (ties: lower id), their probabilities divided by their sum.
  for (int32_t i = 0; i < n_x && d.gating == moe_gating::softmax_norm; ++i) {
    float* p = s.router.data() + size_t(i) * n_exp;
    float mx = -INFINITY;
    for (int32_t e = 0; e < n_exp; ++e) mx = std::max(mx, p[e]);
    double sum = 0;
    for (int32_t e = 0; e < n_exp; ++e) {
      p[e] = std::exp(p[e] - mx);
      sum += double(p[e]);
    }
    const float inv = float(1.0 / sum);
    for (int32_t e = 0; e < n_exp; ++e) p[e] *= inv;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
    float wsum = 0;
    for (int32_t j = 0; j < k; ++j) {
      s.sel[size_t(i) * k + size_t(j)] = order[size_t(j)];
      s.w[size_t(i) * k + size_t(j)] = p[order[size_t(j)]];
      wsum += p[order[size_t(j)]];
    }
    wsum = std::max(wsum, 6.103515625e-5f);  // as llama.cpp's clamp (smallest F16 normal)
    for (int32_t j = 0; j < k; ++j) s.w[size_t(i) * k + size_t(j)] /= wsum;
  }

  // Each expert over the rows routed to it: gather, SwiGLU, scatter to (token, slot).
  for (int32_t e = 0; e < n_exp; ++e) {
    s.rows.clear();
    for (int32_t i = 0; i < n_x * k; ++i)
      if (s.sel[size_t(i)] == e) s.rows.push_back(i);
    const int32_t m = int32_t(s.rows.size());
    if (m == 0) continue;
    s.xg.resize(size_t(m) * n_embd);
    s.g.resize(size_t(m) * n_ff);
    s.u.resize(size_t(m) * n_ff);
    s.y.resize(size_t(m) * n_embd);
    for (int32_t r = 0; r < m; ++r)
      std::memcpy(s.xg.data() + size_t(r) * n_embd, x + size_t(s.rows[size_t(r)] / k) * n_embd,
                  sizeof(float) * size_t(n_embd));
    const weight gate = expert_view(L.moe_gate, n_ff, e), up = expert_view(L.moe_up, n_ff, e);
    const weight down = expert_view(L.moe_down, n_embd, e);
    g_expert_bytes.fetch_add(uint64_t(gate.n_out) * gate.row_bytes + uint64_t(up.n_out) * up.row_bytes +
                                 uint64_t(down.n_out) * down.row_bytes,
                             std::memory_order_relaxed);
    const weight* ws[2] = {&gate, &up};
    float* ys[2] = {s.g.data(), s.u.data()};
    linear_many(pool, ws, s.xg.data(), m, ys);
    if (!L.moe_gate_b.empty()) {  // gpt-oss: biases per expert, as ggml_add_id
      for (int32_t r = 0; r < m; ++r) {
        add_bias(s.g.data() + size_t(r) * n_ff, L.moe_gate_b.data() + size_t(e) * n_ff, n_ff);
        add_bias(s.u.data() + size_t(r) * n_ff, L.moe_up_b.data() + size_t(e) * n_ff, n_ff);
      }
    }
    if (d.moe_act == ffn_act::swiglu_oai)
      swiglu_oai(s.g.data(), s.u.data(), s.g.data(), int64_t(m) * n_ff);
    else
      kernels::silu_mul(s.g.data(), s.u.data(), s.g.data(), int64_t(m) * n_ff);
    linear(pool, down, s.g.data(), m, s.y.data());
    if (!L.moe_down_b.empty())
      for (int32_t r = 0; r < m; ++r) add_bias(s.y.data() + size_t(r) * n_embd, L.moe_down_b.data() + size_t(e) * n_embd, n_embd);
    for (int32_t r = 0; r < m; ++r)
      std::memcpy(s.out.data() + size_t(s.rows[size_t(r)]) * n_embd, s.y.data() + size_t(r) * n_embd,
                  sizeof(float) * size_t(n_embd));
  }

  // out = w_0 y_0 + w_1 y_1 + ... in rank order (ggml: each product rounded, then added in turn).
  // NOTE: the products are stored before they are added, so the compiler cannot fuse them into FMAs.
  for (int32_t i = 0; i < n_x; ++i) {
    float* o = out + size_t(i) * n_embd;
    for (int32_t j = 0; j < k; ++j) {
      const float wj = s.w[size_t(i) * k + size_t(j)];
      float* y = s.out.data() + (size_t(i) * k + size_t(j)) * n_embd;
      for (int32_t c = 0; c < n_embd; ++c) y[c] *= wj;
    }
    std::memcpy(o, s.out.data() + size_t(i) * k * n_embd, sizeof(float) * size_t(n_embd));
    for (int32_t j = 1; j < k; ++j)
      kernels::vec_add(o, s.out.data() + (size_t(i) * k + size_t(j)) * n_embd, o, n_embd);
  }
}

}  // namespace agentq
