// Reference paged decode attention for attention_decode.cu, using the same split:
// partials per attention_partition tokens, combined in partition order (double math); keys
// before a window skipped (its partitions never visited), scores soft-capped, a sink added to the
// denominator (attention_options); rows read through the page map with windowed KV.
#include <algorithm>
#include <cmath>
#include <vector>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void attention_decode(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                      int32_t max_blocks, const int32_t* seq_lens, int32_t n_seqs, int32_t n_head,
                      int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale, float* out,
                      const cuda::attention_options& opt) {
  const int32_t row = n_head_kv * head_dim;
  const int32_t group = n_head / n_head_kv;
  std::vector<double> acc(static_cast<size_t>(head_dim)), part(static_cast<size_t>(head_dim));
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t* table = block_tables + int64_t(s) * max_blocks;
    const int32_t len = seq_lens[s];
    for (int32_t h = 0; h < n_head; ++h) {
      const float* qh = q + (int64_t(s) * n_head + h) * head_dim;
      const int32_t kvh = h / group;
      double big_m = -INFINITY, big_l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      const int32_t first = opt.window > 0 ? std::max(0, len - opt.window) : 0;
      // the partitions from the first visible one (the kernel's grid), in order
      const int32_t pp0 = cuda::attention_first_part(len, opt.window, cuda::attention_partition) * cuda::attention_partition;
      for (int32_t pp = pp0; pp < len; pp += cuda::attention_partition) {
        const int32_t p0 = std::max(pp, first), p1 = std::min(len, pp + cuda::attention_partition);
        if (p0 >= p1) continue;
        std::vector<double> sc(size_t(p1 - p0));
        double m = -INFINITY;
        for (int32_t p = p0; p < p1; ++p) {
          const float* k = k_cache + (int64_t(cuda::kv_page(opt.pages, table[p / block_size])) * block_size + p % block_size) * row +
                           int64_t(kvh) * head_dim;
          double d = 0;
          for (int32_t i = 0; i < head_dim; ++i) d += double(qh[i]) * double(k[i]);
          d *= scale;
          if (opt.softcap != 0.0f) d = std::tanh(d / opt.softcap) * opt.softcap;
          sc[size_t(p - p0)] = d;
          m = std::max(m, d);
        }
        double l = 0;
        std::fill(part.begin(), part.end(), 0.0);
        for (int32_t p = p0; p < p1; ++p) {
          const float* v = v_cache + (int64_t(cuda::kv_page(opt.pages, table[p / block_size])) * block_size + p % block_size) * row +
                           int64_t(kvh) * head_dim;
          const double e = std::exp(sc[size_t(p - p0)] - m);
          l += e;
          for (int32_t i = 0; i < head_dim; ++i) part[size_t(i)] += e * double(v[i]);
        }
        // combine (partition order)
        const double new_m = std::max(big_m, m);
        const double a = std::isinf(big_m) ? 0.0 : std::exp(big_m - new_m);
        const double b = std::exp(m - new_m);
        for (int32_t i = 0; i < head_dim; ++i) acc[size_t(i)] = acc[size_t(i)] * a + part[size_t(i)] * b;
        big_l = big_l * a + l * b;
        big_m = new_m;
      }
      if (opt.sinks) big_l += std::exp(double(opt.sinks[h]) - big_m);
      float* o = out + (int64_t(s) * n_head + h) * head_dim;
      for (int32_t i = 0; i < head_dim; ++i) o[i] = big_l > 0 ? float(acc[size_t(i)] / big_l) : 0.0f;
    }
  }
}

}  // namespace agentq::kernels::ref
