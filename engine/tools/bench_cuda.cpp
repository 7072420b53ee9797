// agentq-bench_cuda: decode-path CUDA microbenchmarks on one device. Measures HBM read
// bandwidth with a streaming kernel (the roofline), then matvec GB/s per weight type for
// 4096x4096 and 14336x4096 as a fraction of it, batched matvec at 32/128 vectors against
// cuBLAS GEMM, and paged decode attention. Prints a compact table, then one JSON line.
//   agentq-bench_cuda [--iters N]
// NOTE: weights rotate over copies totalling > 4x L2 so each call streams from HBM.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"

#if AGENTQ_HAVE_CUDA

namespace cu = agentq::kernels::cuda;
using cu::weight_type;

namespace {

const char* type_name(weight_type t) {
  switch (t) {
    case weight_type::f32: return "f32";
    case weight_type::f16: return "f16";
    case weight_type::bf16: return "bf16";
    case weight_type::q8_0: return "q8_0";
    case weight_type::q4_k: return "q4_k";
    case weight_type::q6_k: return "q6_k";
    default: return agentq::kernels::name_of(agentq::kernels::weight_type(uint32_t(t)));
  }
}

// Bytes that decode well: random quants, scales kept finite (fp16 0x1c00..0x1fff ~ 0.004..0.008).
std::vector<uint8_t> bench_weights(weight_type t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  std::vector<uint8_t> w(cu::row_bytes(t, n_in) * size_t(n_out));
  for (size_t i = 0; i + 4 <= w.size(); i += 4) {
    const uint32_t r = uint32_t(rng());
    std::memcpy(w.data() + i, &r, 4);
  }
  auto fix16 = [&](size_t off) { w[off + 1] = uint8_t(0x1c | (w[off + 1] & 0x03)); };
  if (t == weight_type::f16 || t == weight_type::bf16)
    for (size_t i = 0; i < w.size(); i += 2) w[i + 1] = uint8_t(0x3c | (w[i + 1] & 0x83));  // finite values
  const int64_t n_blocks = int64_t(w.size()) / cu::block_bytes(t);
  for (int64_t b = 0; b < n_blocks && t != weight_type::f16 && t != weight_type::bf16 && t != weight_type::f32; ++b) {
    const size_t base = size_t(b) * size_t(cu::block_bytes(t));
    if (t == weight_type::q8_0) fix16(base);
    if (t == weight_type::q4_k) fix16(base), fix16(base + 2);
    if (t == weight_type::q6_k) fix16(base + 208);
    if (t == weight_type::q4_0 || t == weight_type::q5_0 || t == weight_type::iq4_nl || t == weight_type::iq4_xs) fix16(base);
    if (t == weight_type::q4_1 || t == weight_type::q5_1 || t == weight_type::q5_k) fix16(base), fix16(base + 2);
    if (t == weight_type::q2_k) fix16(base + 80), fix16(base + 82);
    if (t == weight_type::q3_k) fix16(base + 108);
    if (t == weight_type::mxfp4) w[base] = uint8_t(118 + w[base] % 4);
  }
  return w;
}

struct timer {
  void* a = cu::event_create();
  void* b = cu::event_create();
  ~timer() {
    cu::event_destroy(a);
    cu::event_destroy(b);
  }
  template <class F>
  double us_per_call(int iters, F&& f) {  // one warm-up call, then iters timed calls
    f(0);
    cu::event_record(a, nullptr);
    for (int i = 0; i < iters; ++i) f(i + 1);
    cu::event_record(b, nullptr);
    cu::event_synchronize(b);
    return 1000.0 * cu::event_elapsed_ms(a, b) / iters;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
  if (cu::device_count() == 0) {
    std::fprintf(stderr, "agentq-bench_cuda: no CUDA device\n");
    return 77;
  }
  const size_t l2 = cu::device_l2_bytes();
  std::printf("device: %s  L2 %.0f MiB\n", cu::device_name(), double(l2) / (1 << 20));
  timer t;
  std::string json = "{\"bench\":\"cuda\"";

  // 1. HBM read bandwidth: stream 4 GiB.
  const size_t probe_bytes = size_t(4) << 30;
  cu::device_buffer probe(probe_bytes), sink(64);
  if (!probe.ok() || !probe.zero()) return 1;
  const double probe_us = t.us_per_call(10, [&](int) { cu::read_bandwidth_probe(probe.data(), probe_bytes, sink.as<float>(), nullptr); });
  const double bw = double(probe_bytes) / probe_us / 1e3;  // GB/s
  std::printf("HBM read (streaming probe): %.0f GB/s\n\n", bw);
  json += ",\"hbm_read_gbs\":" + std::to_string(bw);
  probe = cu::device_buffer();

  // 2. matvec per type and shape; batched matvec vs cuBLAS.
  std::mt19937 rng(1);
  void* blas = cu::cublas_create(nullptr);
  struct shape { int64_t n_out, n_in; };
  const shape shapes[] = {{4096, 4096}, {14336, 4096}};
  const weight_type types[] = {weight_type::f16, weight_type::bf16, weight_type::q8_0, weight_type::q4_k,
                               weight_type::q6_k};
  std::printf("%-5s %-11s | %8s %7s %5s | %9s %9s | %9s %9s\n", "type", "n_out x n_in", "n=1 us", "GB/s", "%bw",
              "n=32 us", "gemm us", "n=128 us", "gemm us");
  json += ",\"matvec\":[";
  bool first = true;
  for (const shape& sh : shapes) {
    cu::device_buffer x(size_t(128 * sh.n_in) * 4), y(size_t(128 * sh.n_out) * 4);
    x.zero();
    for (weight_type ty : types) {
      const size_t bytes = cu::row_bytes(ty, sh.n_in) * size_t(sh.n_out);
      const auto host = bench_weights(ty, sh.n_out, sh.n_in, rng);
      const int n_copies = int(std::max<size_t>(1, (4 * l2 + bytes - 1) / bytes));
      std::vector<cu::device_buffer> w;
      for (int c = 0; c < n_copies; ++c) {
        w.emplace_back(bytes);
        if (!w.back().ok() || !w.back().upload(host.data(), bytes)) return 1;
      }
      auto mv = [&](int n_x) {
        return t.us_per_call(iters, [&](int i) {
          cu::matvec(ty, w[size_t(i % n_copies)].data(), sh.n_out, sh.n_in, x.as<float>(), n_x, y.as<float>(), nullptr);
        });
      };
      const double us1 = mv(1), us32 = mv(32), us128 = mv(128);
      double g32 = -1, g128 = -1;
      if (blas) {
        cu::device_buffer scratch(cu::gemm_scratch_bytes(ty, sh.n_out, sh.n_in, 128) + 256);
        auto gm = [&](int n_x) {
          return t.us_per_call(std::max(1, iters / 5), [&](int i) {
            cu::gemm(blas, ty, w[size_t(i % n_copies)].data(), sh.n_out, sh.n_in, x.as<float>(), n_x, y.as<float>(),
                     scratch.data(), nullptr);
          });
        };
        g32 = gm(32);
        g128 = gm(128);
      }
      const double gbs = double(bytes) / us1 / 1e3;
      char shape_s[32];
      std::snprintf(shape_s, sizeof(shape_s), "%lldx%lld", (long long)sh.n_out, (long long)sh.n_in);
      std::printf("%-5s %-11s | %8.1f %7.0f %4.0f%% | %9.1f %9.1f | %9.1f %9.1f\n", type_name(ty), shape_s, us1, gbs,
                  100.0 * gbs / bw, us32, g32, us128, g128);
      char js[320];
      std::snprintf(js, sizeof(js),
                    "%s{\"type\":\"%s\",\"shape\":\"%s\",\"us_n1\":%.2f,\"gbs_n1\":%.1f,\"frac_bw\":%.3f,"
                    "\"us_n32\":%.2f,\"us_n128\":%.2f,\"gemm_us_n32\":%.2f,\"gemm_us_n128\":%.2f}",
                    first ? "" : ",", type_name(ty), shape_s, us1, gbs, gbs / bw, us32, us128, g32, g128);
      json += js;
      first = false;
    }
  }
  json += "]";
  cu::cublas_destroy(blas);

  // 2b. Batch-1 f16 matvec variants (rows per warp x loads in flight; the same bits) on an
  // 8B layer's shapes: Q/K/V fused (6144x4096), wo (4096x4096), gate/up + SwiGLU (2 x
  // 14336x4096) and down (4096x14336). "layer us" sums them: the variant decode should use.
  {
    struct sh16 { const char* name; int64_t n_out, n_in; bool glu; };
    const sh16 shapes16[] = {{"qkv 6144x4096", 6144, 4096, false}, {"wo 4096x4096", 4096, 4096, false},
                             {"gate+up 14336x4096", 14336, 4096, true}, {"down 4096x14336", 4096, 14336, false}};
    const int variants[][2] = {{1, 2}, {1, 4}, {1, 8}, {2, 2}, {2, 4}, {2, 8}, {4, 2}, {4, 4}};
    std::printf("\nf16 batch-1 matvec variants (us per call; GB/s in brackets)\n%-6s", "RxU");
    for (const sh16& h : shapes16) std::printf(" | %20s", h.name);
    std::printf(" | %9s\n", "layer us");
    struct bufs { std::vector<cu::device_buffer> w; int n_copies; size_t bytes; };
    std::vector<bufs> mats;
    for (const sh16& h : shapes16) {
      bufs b;
      b.bytes = cu::row_bytes(weight_type::f16, h.n_in) * size_t(h.n_out) * (h.glu ? 2 : 1);
      b.n_copies = int(std::max<size_t>(1, (4 * l2 + b.bytes - 1) / b.bytes));
      const auto host = bench_weights(weight_type::f16, h.n_out * (h.glu ? 2 : 1), h.n_in, rng);
      for (int c = 0; c < b.n_copies; ++c) {
        b.w.emplace_back(b.bytes);
        if (!b.w.back().ok() || !b.w.back().upload(host.data(), b.bytes)) return 1;
      }
      mats.push_back(std::move(b));
    }
    cu::device_buffer x(size_t(14336) * 4), y(size_t(2 * 14336) * 4);
    x.zero();
    json += ",\"matvec16_variants\":[";
    double best_us = 1e30;
    int best[2] = {0, 0};
    for (size_t vi = 0; vi < sizeof(variants) / sizeof(variants[0]); ++vi) {
      const int r = variants[vi][0], u = variants[vi][1];
      if (!cu::set_matvec16_variant(r, u)) continue;
      std::printf("%dx%-4d", r, u);
      double layer = 0;
      std::string js = std::string(vi ? "," : "") + "{\"rows\":" + std::to_string(r) + ",\"loads\":" + std::to_string(u);
      for (size_t si = 0; si < mats.size(); ++si) {
        const sh16& h = shapes16[si];
        bufs& b = mats[si];
        const size_t half = b.bytes / 2;
        const double us = t.us_per_call(iters, [&](int i) {
          const auto* w = static_cast<const uint8_t*>(b.w[size_t(i % b.n_copies)].data());
          if (h.glu)
            cu::matvec_swiglu(weight_type::f16, w, w + half, h.n_out, h.n_in, x.as<float>(), 1, y.as<float>(), nullptr);
          else
            cu::matvec(weight_type::f16, w, h.n_out, h.n_in, x.as<float>(), 1, y.as<float>(), nullptr);
        });
        layer += us;
        std::printf(" | %10.1f (%5.0f GB/s)", us, double(b.bytes) / us / 1e3);
        js += ",\"us_" + std::to_string(si) + "\":" + std::to_string(us);
      }
      std::printf(" | %9.1f\n", layer);
      json += js + ",\"layer_us\":" + std::to_string(layer) + "}";
      if (layer < best_us) best_us = layer, best[0] = r, best[1] = u;
    }
    json += "]";
    double layer_bytes = 0;
    for (const bufs& b : mats) layer_bytes += double(b.bytes);
    std::printf("best: %dx%d, %.1f us per layer = %.0f GB/s (%.0f%% of the probe)\n", best[0], best[1], best_us,
                layer_bytes / best_us / 1e3, 100.0 * layer_bytes / best_us / 1e3 / bw);
    json += ",\"matvec16_best\":\"" + std::to_string(best[0]) + "x" + std::to_string(best[1]) + "\"";
  }

  // 3. Paged decode attention: 32 sequences x 4096 tokens, 32 heads / 8 KV heads, head_dim 128, fp32 KV.
  {
    const int32_t n_seqs = 32, len = 4096, n_head = 32, n_head_kv = 8, head_dim = 128, bs = 16;
    const int32_t max_blocks = len / bs, n_blocks = n_seqs * max_blocks;
    const size_t kv_floats = size_t(n_blocks) * bs * n_head_kv * head_dim;
    cu::device_buffer k(kv_floats * 4), v(kv_floats * 4), q(size_t(n_seqs * n_head * head_dim) * 4),
        out(size_t(n_seqs * n_head * head_dim) * 4),
        ws(cu::attention_decode_workspace_floats(n_seqs, n_head, head_dim, len) * 4);
    std::vector<int32_t> tables(static_cast<size_t>(n_blocks)), lens(static_cast<size_t>(n_seqs), len);
    for (int32_t i = 0; i < n_blocks; ++i) tables[size_t(i)] = i;
    std::shuffle(tables.begin(), tables.end(), rng);
    cu::device_buffer dt(tables.size() * 4), dl(lens.size() * 4);
    k.zero(), v.zero(), q.zero();
    dt.upload(tables.data(), tables.size() * 4);
    dl.upload(lens.data(), lens.size() * 4);
    const double us = t.us_per_call(iters, [&](int) {
      cu::attention_decode(q.as<float>(), k.as<float>(), v.as<float>(), dt.as<int32_t>(), max_blocks,
                           dl.as<int32_t>(), n_seqs, len, n_head, n_head_kv, head_dim, bs, 0.088f, ws.as<float>(),
                           out.as<float>(), nullptr);
    });
    const double gbs = double(2 * kv_floats * 4) / us / 1e3;
    std::printf("\nattention_decode 32 seqs x 4096 ctx, 32/8 heads, hd 128 (fp32 KV): %.1f us, %.0f GB/s (%.0f%% bw)\n",
                us, gbs, 100.0 * gbs / bw);
    json += ",\"attn_decode_us\":" + std::to_string(us) + ",\"attn_decode_gbs\":" + std::to_string(gbs);
  }
  json += ",\"cuda_failed\":" + std::string(cu::cuda_failed() ? "true" : "false") + "}";
  std::printf("%s\n", json.c_str());
  return cu::cuda_failed() ? 1 : 0;
}

#else

int main() {
  std::fprintf(stderr, "agentq-bench_cuda: built without the CUDA backend (configure with -DAGENTQ_CUDA=ON)\n");
  return 77;
}

#endif
