// Reference paged causal prefill attention for attention_prefill.cu: a direct
// softmax over positions [0, n_past + j] per query row (double math), GQA; a window's masked keys
// skipped, scores soft-capped, a sink added to the denominator (attention_options).
#include <algorithm>
#include <cmath>
#include <vector>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void attention_prefill(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                       int32_t max_blocks, const int32_t* q_start, const int32_t* n_past, int32_t n_seqs,
                       int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale,
                       float* out, const cuda::attention_options& opt) {
  const int32_t row = n_head_kv * head_dim;
  const int32_t group = n_head / n_head_kv;
  std::vector<double> sc, acc(static_cast<size_t>(head_dim));
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t* table = block_tables + int64_t(s) * max_blocks;
    for (int32_t t = q_start[s]; t < q_start[s + 1]; ++t) {
      const int32_t n_keys = n_past[s] + (t - q_start[s]) + 1;
      sc.assign(size_t(n_keys), 0.0);
      for (int32_t h = 0; h < n_head; ++h) {
        const float* qh = q + (int64_t(t) * n_head + h) * head_dim;
        const int64_t kv_off = int64_t(h / group) * head_dim;
        double m = -INFINITY;
        const int32_t first = opt.window > 0 ? std::max(0, n_keys - opt.window) : 0;
        for (int32_t p = first; p < n_keys; ++p) {
          const float* k = k_cache + (int64_t(cuda::kv_page(opt.pages, table[p / block_size])) * block_size + p % block_size) * row + kv_off;
          double d = 0;
          for (int32_t i = 0; i < head_dim; ++i) d += double(qh[i]) * double(k[i]);
          d *= scale;
          if (opt.softcap != 0.0f) d = std::tanh(d / opt.softcap) * opt.softcap;
          sc[size_t(p)] = d;
          m = std::max(m, d);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t p = first; p < n_keys; ++p) {
          const float* v = v_cache + (int64_t(cuda::kv_page(opt.pages, table[p / block_size])) * block_size + p % block_size) * row + kv_off;
          const double e = std::exp(sc[size_t(p)] - m);
          l += e;
          for (int32_t i = 0; i < head_dim; ++i) acc[size_t(i)] += e * double(v[i]);
        }
        if (opt.sinks) l += std::exp(double(opt.sinks[h]) - m);
        float* o = out + (int64_t(t) * n_head + h) * head_dim;
        for (int32_t i = 0; i < head_dim; ++i) o[i] = float(acc[size_t(i)] / l);
      }
    }
  }
}

}  // namespace agentq::kernels::ref
