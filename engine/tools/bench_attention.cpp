// agentq-bench_attention: what a verify pass's (or a prefill's) attention costs per path: every
// head of one layer, n_q queries at positions pos0.. over a paged F16 (or F32) cache, through
// attend() as the engine calls it: "tiles" (attention_tiles.cpp, the K/V read in place), "packed"
// (the head's K/V copied to F32 first, then one query per call over the copy; below 4 queries
// the cache read in place), "one" (one query per call, decode's
// kernel). One thread, thread CPU clock, median of --trials (the paths interleaved); with --cold (default) a 64 MiB
// stream evicts the cache between trials, as decode's weight stream does. --prefill N: instead,
// a prefill of N tokens in runs of 32 (transformer.cpp's k_run). Ends with one JSON line.
//   agentq-bench_attention [--pos0 450] [--queries 1,2,4,8,17,24,32] [--heads 12] [--head-dim 64]
//                          [--dtype f16] [--block 64] [--trials 21] [--cold 1] [--prefill 0] [--only PATH]
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "kv/kv_store.h"
#include "model/attention.h"
#include "model/attention_simd.h"

using namespace agentq;

namespace {

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::vector<int32_t> parse_list(const std::string& v) {
  std::vector<int32_t> out;
  for (size_t p = 0; p <= v.size();) {
    size_t q = v.find(',', p);
    if (q == std::string::npos) q = v.size();
    out.push_back(std::atoi(v.substr(p, q - p).c_str()));
    p = q + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int32_t pos0 = 450, heads = 12, hd = 64, block = 64, trials = 21, prefill = 0;
  bool cold = true;
  std::string only;  // one path alone (for perf record): tiles, packed or one
  kv_dtype dt = kv_dtype::f16;
  std::vector<int32_t> queries = {1, 2, 4, 8, 17, 24, 32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--pos0") pos0 = std::atoi(v.c_str());
    else if (a == "--queries") queries = parse_list(v);
    else if (a == "--heads") heads = std::atoi(v.c_str());
    else if (a == "--head-dim") hd = std::atoi(v.c_str());
    else if (a == "--block") block = std::atoi(v.c_str());
    else if (a == "--trials") trials = std::max(1, std::atoi(v.c_str()));
    else if (a == "--cold") cold = std::atoi(v.c_str()) != 0;
    else if (a == "--prefill") prefill = std::atoi(v.c_str());
    else if (a == "--only") only = v;
    else if (a == "--dtype" && parse_kv_dtype(v, &dt)) {
    } else {
      std::fprintf(stderr,
                   "usage: agentq-bench_attention [--pos0 N] [--queries a,b] [--heads N] [--head-dim N] [--dtype f16|f32]"
                   " [--block N] [--trials N] [--cold 0|1] [--prefill N] [--only tiles|packed|one]\n");
      return 2;
    }
  }
  int32_t max_q = 0;
  for (int32_t n : queries) max_q = std::max(max_q, n);
  const int32_t n_pos = prefill > 0 ? prefill : pos0 + max_q;
  kv_layout l;
  l.n_layer = 1;
  l.n_head_kv = heads;
  l.head_dim = hd;
  l.block_size = block;
  l.dtype = dt;
  l.head_major = true;
  const int32_t n_blocks = (n_pos + block - 1) / block;
  kv_store kv(l, n_blocks);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = i;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int32_t b = 0; b < n_blocks; ++b)
    for (int64_t i = 0; i < l.block_elems(); ++i) {
      if (dt == kv_dtype::f16) {
        kv.k<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(nd(rng));
        kv.v<uint16_t>(0, b)[i] = kernels::fp32_to_fp16(nd(rng));
      } else {
        kv.k<float>(0, b)[i] = nd(rng);
        kv.v<float>(0, b)[i] = nd(rng);
      }
    }
  const int32_t n_q_all = prefill > 0 ? prefill : max_q;
  std::vector<float> q(size_t(n_q_all) * heads * hd), out(q.size()), scores(size_t(n_pos) + 64);
  for (float& x : q) x = nd(rng);
  std::vector<char> evict(cold ? size_t(64) << 20 : 0);
  volatile char sink = 0;

  auto args_of = [&](int32_t h) {
    attention_args a;
    a.kv = &kv;
    a.block_table = table.data();
    a.block_size = block;
    a.token_stride = l.token_stride();
    a.head_offset = int32_t(l.elem_offset(0, h));
    a.head_dim = hd;
    a.scale = 1.0f / 8.0f;
    return a;
  };
  const int64_t stride = int64_t(heads) * hd;
  // One trial: every head, n_q queries at p0 (or the prefill's runs), through `path`; seconds.
  auto trial = [&](const std::string& path, int32_t p0, int32_t n_q, int r) {
    const int32_t saved = attn::tiles_min_queries;
    attn::tiles_min_queries = path == "tiles" ? 1 : INT32_MAX;
    if (cold) {
      for (size_t i = 0; i < evict.size(); i += 64) evict[i] = char(evict[i] + 1);
      sink = evict[size_t(r) * 64 % evict.size()];
    }
    const double t0 = thread_cpu();
    for (int32_t h = 0; h < heads; ++h) {
      const attention_args a = args_of(h);
      for (int32_t i0 = prefill > 0 ? 0 : p0, e = prefill > 0 ? prefill : p0 + n_q; i0 < e; i0 += 32) {
        const int32_t n = prefill > 0 ? std::min(32, e - i0) : n_q;
        const int64_t base = int64_t(prefill > 0 ? i0 : i0 - p0) * stride + h * hd;
        if (path == "one") {
          for (int32_t j = 0; j < n; ++j)
            attend(a, q.data() + base + j * stride, stride, i0 + j, 1, out.data() + base + j * stride, stride,
                   scores.data());
        } else {
          attend(a, q.data() + base, stride, i0, n, out.data() + base, stride, scores.data());
        }
        if (prefill == 0) break;
      }
    }
    const double dt = thread_cpu() - t0;
    attn::tiles_min_queries = saved;
    return dt;
  };
  // The paths' trials interleaved (a shared host's load moves all of them alike); medians in us.
  auto run = [&](const std::vector<std::string>& paths, int32_t p0, int32_t n_q) {
    std::vector<std::vector<double>> ts(paths.size());
    for (int r = 0; r < trials; ++r)
      for (size_t i = 0; i < paths.size(); ++i)
        ts[i].push_back(only.empty() || only == paths[i] ? trial(paths[i], p0, n_q, r) : 0.0);
    std::vector<double> med;
    for (auto& t : ts) {
      std::sort(t.begin(), t.end());
      med.push_back(t[t.size() / 2] * 1e6);
    }
    return med;
  };
  std::string json = "{\"bench\":\"attention\",\"head_dim\":" + std::to_string(hd) + ",\"heads\":" +
                     std::to_string(heads) + ",\"dtype\":\"" + kv_dtype_name(dt) + "\",\"cold\":" +
                     (cold ? "true" : "false");
  if (prefill > 0) {
    const auto m = run({"tiles", "packed"}, 0, 0);
    const double t = m[0], p = m[1];
    std::printf("prefill %d tokens, %d heads: tiles %.0f us, packed %.0f us (tiles / packed %.3f)\n", prefill, heads,
                t, p, t / p);
    json += ",\"prefill\":" + std::to_string(prefill) + ",\"us_tiles\":" + std::to_string(t) +
            ",\"us_packed\":" + std::to_string(p);
  } else {
    json += ",\"pos0\":" + std::to_string(pos0) + ",\"rows\":[";
    for (size_t i = 0; i < queries.size(); ++i) {
      const int32_t n = queries[i];
      const auto m = run({"tiles", "packed", "one"}, pos0, n);
      const double t = m[0], p = m[1], o = m[2];
      std::printf("n_q %2d at pos0 %d, %d heads: tiles %7.1f us, packed %7.1f us, one at a time %7.1f us"
                  " (tiles / packed %.3f)\n",
                  n, pos0, heads, t, p, o, t / p);
      json += std::string(i ? "," : "") + "{\"n_q\":" + std::to_string(n) + ",\"us_tiles\":" + std::to_string(t) +
              ",\"us_packed\":" + std::to_string(p) + ",\"us_one\":" + std::to_string(o) + "}";
    }
    json += "]";
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
