// agentq-bench_engine: forward-pass throughput per model — pp512 (one 512-token
// prefill) and tg128 (128 single-token decode steps) — beside the measured read
// bandwidth (host memory, or HBM with --device cuda), so decode is reported as a
// fraction of its memory roofline.
//   agentq-bench_engine [--device cpu|cuda|cuda:N] [--threads N] [--pp 512] [--tg 128] [--reps R]
//                       [--kv-type f16|f32] [--depth D] [--block-size B] MODEL.gguf...
// --depth D: the tg steps decode after D tokens of context (positions D..D+tg-1; default 0, as
// llama-bench's tg), so they also read D+ tokens of K/V each: the agent case of a long prefix.
// --block-size B: tokens per KV block (default 64, engine_config::block_size's default).
// Ends with one JSON line: {"threads":N,"device":D,"results":[{model,type,pp512_tokens_per_s,...}]}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agentq/engine.h"
#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"
#include "backend/backend.h"
#include "gguf/reader.h"
#include "model/moe.h"

namespace {

using namespace agentq;

// CPU seconds of the whole process (all pool threads).
double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct result {
  std::string model, type, kv_type;
  double pp_tps = 0, tg_tps = 0, bandwidth_gbps = 0, bytes_per_token = 0, roofline_fraction = 0;
  double kv_bytes_per_token = 0;  // K/V one tg step reads, averaged over the steps (not in the roofline)
  // MoE: expert bytes a decoded token read (measured in moe_ffn), beside the active and all experts' bytes.
  double moe_read_per_token = 0, moe_active_bytes = 0, moe_all_bytes = 0;
  // The same by CPU clock (tokens per CPU-second per thread): robust on a shared, oversubscribed host.
  double pp_tps_cpu = 0, tg_tps_cpu = 0, bandwidth_cpu_gbps = 0, roofline_fraction_cpu = 0;
};

// Bytes of weights one decode step reads: every tensor but the embedding table (one row is read),
// plus the table when it doubles as the output projection.
// Weight bytes one decoded token reads: every matrix once, one row of an untied token_embd,
// and of stacked experts (*_exps) the used share (expert_used_count of expert_count: the
// active parameters, MoE's roofline). *expert_bytes: those experts' bytes (active, all).
double decode_bytes(const gguf::file& f, double* active_expert_bytes = nullptr, double* all_expert_bytes = nullptr) {
  double bytes = 0, active = 0, all = 0;
  bool tied = !f.find_tensor("output.weight");
  const std::string arch(f.get_string("general.architecture").value_or(""));
  const double n_exp = double(f.get_int(arch + ".expert_count").value_or(0));
  const double n_used = double(f.get_int(arch + ".expert_used_count").value_or(0));
  for (const auto& t : f.tensors()) {
    if (t.name == "token_embd.weight" && !tied) {
      bytes += double(t.n_bytes) / double(std::max<int64_t>(1, t.dims.size() > 1 ? t.dims[1] : 1));
    } else if (n_exp > 0 && t.name.find("_exps.weight") != std::string::npos) {
      all += double(t.n_bytes);
      active += double(t.n_bytes) * n_used / n_exp;
      bytes += double(t.n_bytes) * n_used / n_exp;
    } else {
      bytes += double(t.n_bytes);
    }
  }
  if (active_expert_bytes) *active_expert_bytes = active;
  if (all_expert_bytes) *all_expert_bytes = all;
  return bytes;
}

// The type most of the weight bytes have ("Q4_K").
std::string main_type(const gguf::file& f) {
  std::map<std::string, uint64_t> by;
  for (const auto& t : f.tensors()) by[gguf::name_of(t.type)] += t.n_bytes;
  std::string best;
  uint64_t most = 0;
  for (const auto& [n, b] : by)
    if (b > most) {
      most = b;
      best = n;
    }
  return best;
}

// HBM read bandwidth of the current CUDA device (a streaming probe over 2 GiB); 0 without CUDA.
double device_read_bandwidth_gbps() {
#if AGENTQ_HAVE_CUDA
  namespace cu = kernels::cuda;
  const size_t bytes = size_t(2) << 30;
  cu::device_buffer buf(bytes), sink(64);
  void* a = cu::event_create();
  void* b = cu::event_create();
  double gbps = 0;
  if (buf.ok() && buf.zero() && a && b) {
    cu::read_bandwidth_probe(buf.data(), bytes, sink.as<float>(), nullptr);  // warm-up
    const int iters = 10;
    cu::event_record(a, nullptr);
    for (int i = 0; i < iters; ++i) cu::read_bandwidth_probe(buf.data(), bytes, sink.as<float>(), nullptr);
    cu::event_record(b, nullptr);
    cu::event_synchronize(b);
    gbps = double(bytes) * iters / (cu::event_elapsed_ms(a, b) * 1e-3) / 1e9;
  }
  cu::event_destroy(a);
  cu::event_destroy(b);
  return gbps;
#else
  return 0;
#endif
}

const char* k_usage =
    "usage: agentq-bench_engine [--device cpu|cuda|cuda:N] [--threads N] [--pp 512] [--tg 128] [--reps R] "
    "[--kv-type f16|f32] [--depth D] [--block-size B] "
    "MODEL.gguf...\n";

}  // namespace

int main(int argc, char** argv) {
  int32_t n_threads = int32_t(std::max(1u, std::thread::hardware_concurrency()));
  int32_t n_pp = 512, n_tg = 128, reps = 2;
  std::string device = "cpu";
  std::string kv_type;  // empty: the device's default
  int32_t depth = 0;
  int32_t block_size = engine_config{}.block_size;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--threads"))
      n_threads = std::atoi(argv[++i]);
    else if (arg("--pp"))
      n_pp = std::atoi(argv[++i]);
    else if (arg("--tg"))
      n_tg = std::atoi(argv[++i]);
    else if (arg("--reps"))
      reps = std::max(1, std::atoi(argv[++i]));
    else if (arg("--device"))
      device = argv[++i];
    else if (arg("--kv-type"))
      kv_type = argv[++i];
    else if (arg("--depth"))
      depth = std::atoi(argv[++i]);
    else if (arg("--block-size"))
      block_size = std::atoi(argv[++i]);
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "%s", k_usage);
      return 2;
    } else
      paths.push_back(argv[i]);
  }
  if (paths.empty() || n_pp <= 0 || n_tg <= 0 || depth < 0 || block_size <= 0) {
    std::fprintf(stderr, "%s", k_usage);
    return 2;
  }
  const bool on_cpu = device == "cpu";

  // NOTE: bandwidth is measured with the same thread count, before each model, so a
  // busy shared host shows up in both numbers rather than only in tokens/s.
  std::vector<result> results;
  for (const auto& path : paths) {
    std::string err;
    std::shared_ptr<const gguf::file> file = gguf::file::open(path, &err);
    if (!file) {
      std::fprintf(stderr, "bench_engine: %s\n", err.c_str());
      return 1;
    }
    auto mdl = forward_backend::create(device, file, n_threads, &err);
    if (!mdl) {
      std::fprintf(stderr, "bench_engine: %s: %s\n", path.c_str(), err.c_str());
      return 1;
    }
    if (!kv_type.empty()) {
      kv_dtype t;
      if (!parse_kv_dtype(kv_type, &t) || !mdl->set_kv_type(t, &err)) {
        std::fprintf(stderr, "bench_engine: --kv-type %s: %s\n", kv_type.c_str(),
                     err.empty() ? "expected f16 or f32" : err.c_str());
        return 2;
      }
    }
    const model_hparams& hp = mdl->hparams();
    result r;
    r.model = std::filesystem::path(path).stem().string();
    r.type = main_type(*file);
    r.kv_type = kv_dtype_name(mdl->kv_type());
    r.bytes_per_token = decode_bytes(*file, &r.moe_active_bytes, &r.moe_all_bytes);

    const int32_t n_ctx = std::max(n_pp, depth + n_tg);
    const int32_t n_blocks = (n_ctx + block_size - 1) / block_size;
    if (!mdl->alloc_kv(block_size, n_blocks, &err)) {
      std::fprintf(stderr, "bench_engine: %s\n", err.c_str());
      return 1;
    }
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = i;
    std::vector<float> logits(size_t(hp.n_vocab));
    std::vector<token_id> tokens(static_cast<size_t>(n_ctx));
    for (int32_t i = 0; i < n_ctx; ++i) tokens[size_t(i)] = token_id((i * 7919 + 13) % hp.n_vocab);
    auto forward = [&](const batch_seq& s) {
      if (mdl->forward({&s, 1}, logits.data()) < 0) {
        std::fprintf(stderr, "bench_engine: the forward pass on %s failed: %s\n", mdl->device().c_str(),
                     mdl->failure().c_str());
        std::exit(1);
      }
    };

    // Warm up: pages in the weights and grows the scratch buffers.
    {
      batch_seq s{table.data(), 0, tokens.data(), std::min(n_pp, 16), false};
      forward(s);
    }
    // --depth: the context the tg steps follow, written once (untimed) in 512-token chunks.
    for (int32_t p0 = 0; p0 < depth; p0 += 512) {
      batch_seq s{table.data(), p0, tokens.data() + p0, std::min(512, depth - p0), false};
      forward(s);
    }
    {
      const kv_layout L = mdl->kv_layout_for(block_size);
      r.kv_bytes_per_token = 2.0 * L.n_layer * L.row() * L.elem_bytes() * (depth + (n_tg + 1) / 2.0);
    }
    const size_t bw_bytes =
        size_t(std::min(2.0 * 1024 * 1024 * 1024, std::max(256.0 * 1024 * 1024, r.bytes_per_token)));
    double best_pp = 1e30, best_tg = 1e30, best_pp_cpu = 1e30, best_tg_cpu = 1e30;
    // NOTE: on the CPU the bandwidth is probed right after each decode repetition and each
    // repetition gives its own ratio; the reported fraction is their median, so a shared host's
    // load swings hit decode and its roofline alike (one probe at the end did not).
    std::vector<double> bw, bw_cpu, frac, frac_cpu;
    for (int rep = 0; rep < reps; ++rep) {
      batch_seq s{table.data(), 0, tokens.data(), n_pp, false};
      double t0 = now_s(), c0 = process_cpu_s();
      forward(s);
      best_pp = std::min(best_pp, now_s() - t0);
      best_pp_cpu = std::min(best_pp_cpu, process_cpu_s() - c0);
      t0 = now_s();
      c0 = process_cpu_s();
      const uint64_t moe0 = moe_expert_bytes_read();
      for (int32_t p = 0; p < n_tg; ++p) {
        batch_seq d{table.data(), depth + p, tokens.data() + depth + p, 1, false};
        forward(d);
      }
      const double tg_s = now_s() - t0, tg_cpu_s = process_cpu_s() - c0;
      r.moe_read_per_token = double(moe_expert_bytes_read() - moe0) / n_tg;
      best_tg = std::min(best_tg, tg_s);
      best_tg_cpu = std::min(best_tg_cpu, tg_cpu_s);
      if (on_cpu) {
        bw.push_back(kernels::measure_read_bandwidth_gbps(bw_bytes, n_threads));
        bw_cpu.push_back(kernels::measure_read_bandwidth_cpu_gbps(bw_bytes, n_threads));
        frac.push_back((n_tg / tg_s) / (bw.back() * 1e9 / r.bytes_per_token));
        frac_cpu.push_back((n_tg / (tg_cpu_s / n_threads)) / (bw_cpu.back() * 1e9 / r.bytes_per_token));
      }
    }
    // NOTE: per-thread CPU time; idle workers' spinning counts, so this understates multi-thread runs.
    r.pp_tps_cpu = n_pp / (best_pp_cpu / n_threads);
    r.tg_tps_cpu = n_tg / (best_tg_cpu / n_threads);
    r.pp_tps = n_pp / best_pp;
    r.tg_tps = n_tg / best_tg;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    // NOTE: on a GPU the roofline is HBM bandwidth; CPU-clock figures mean nothing there (left 0).
    r.bandwidth_gbps = on_cpu ? median(bw) : device_read_bandwidth_gbps();
    const double roofline_tps = r.bandwidth_gbps * 1e9 / r.bytes_per_token;
    r.roofline_fraction = on_cpu ? median(frac) : r.tg_tps / roofline_tps;
    if (on_cpu) {
      r.bandwidth_cpu_gbps = median(bw_cpu);
      r.roofline_fraction_cpu = median(frac_cpu);
    } else {
      r.pp_tps_cpu = r.tg_tps_cpu = 0;
    }
    std::fprintf(
        stderr,
        "%-16s %-5s kv %s pp%d %9.1f tok/s | tg%d %8.2f tok/s | %.1f MB/token, read bw %.1f GB/s -> roofline %.1f "
        "tok/s, decode at %.0f%% (median of per-repetition ratios); K/V %.1f MB/token at depth %d\n",
        r.model.c_str(), r.type.c_str(), r.kv_type.c_str(), n_pp, r.pp_tps, n_tg, r.tg_tps, r.bytes_per_token / 1e6,
        r.bandwidth_gbps, roofline_tps, 100.0 * r.roofline_fraction, r.kv_bytes_per_token / 1e6, depth);
    if (r.moe_all_bytes > 0)
      std::fprintf(stderr, "%-16s %-5s          MoE: experts read %.1f MB/token (active %.1f MB, all %.1f MB)\n", "", "",
                   r.moe_read_per_token / 1e6, r.moe_active_bytes / 1e6, r.moe_all_bytes / 1e6);
    if (on_cpu)
      std::fprintf(stderr,
                   "%-16s %-5s          by CPU clock: pp %9.1f tok/s | tg %8.2f tok/s | read bw %.1f GB/s, decode at %.0f%%\n",
                   "", "", r.pp_tps_cpu, r.tg_tps_cpu, r.bandwidth_cpu_gbps, 100.0 * r.roofline_fraction_cpu);
    results.push_back(r);
  }

  std::printf("{\"threads\":%d,\"device\":\"%s\",\"pp\":%d,\"tg\":%d,\"depth\":%d,\"results\":[", n_threads,
              device.c_str(), n_pp, n_tg, depth);
  for (size_t i = 0; i < results.size(); ++i) {
    const result& r = results[i];
    std::printf(
        "%s{\"model\":\"%s\",\"type\":\"%s\",\"kv_type\":\"%s\",\"pp512_tokens_per_s\":%.2f,\"tg128_tokens_per_s\":%.3f,"
        "\"bandwidth_gb_per_s\":%.2f,\"weight_bytes_per_token\":%.0f,\"kv_bytes_per_token\":%.0f,"
        "\"roofline_fraction\":%.4f,"
        "\"moe_expert_bytes_read_per_token\":%.0f,\"moe_active_expert_bytes\":%.0f,\"moe_all_expert_bytes\":%.0f,"
        "\"cpu_clock\":{\"pp512_tokens_per_s\":%.2f,\"tg128_tokens_per_s\":%.3f,\"bandwidth_gb_per_s\":%.2f,"
        "\"roofline_fraction\":%.4f}}",
        i ? "," : "", r.model.c_str(), r.type.c_str(), r.kv_type.c_str(), r.pp_tps, r.tg_tps, r.bandwidth_gbps,
        r.bytes_per_token, r.kv_bytes_per_token, r.roofline_fraction, r.moe_read_per_token, r.moe_active_bytes,
        r.moe_all_bytes, r.pp_tps_cpu, r.tg_tps_cpu, r.bandwidth_cpu_gbps, r.roofline_fraction_cpu);
  }
  std::printf("]}\n");
  return 0;
}
