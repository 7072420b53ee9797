// agentq-bench_kernels: decode matvec and prefill matmul throughput per weight type
// against the measured streaming-read bandwidth (the roofline). Ends with one JSON line.
//   agentq-bench_kernels [--rows N] [--cols N] [--threads N] [--batch N] [--types f16,q8_0,...] [--seconds S]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agentq/kernels.h"

namespace k = agentq::kernels;

namespace {

struct options {
  int64_t n_rows = 4096, n_cols = 4096, n_batch = 64;
  int n_threads = 2;
  double seconds = 0.6;  // per measurement
  std::vector<k::weight_type> types = {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16,
                                       k::weight_type::q8_0, k::weight_type::q6_k, k::weight_type::q4_k};
};

bool parse_type(const std::string& s, k::weight_type* t) {
  for (auto c : {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16, k::weight_type::q8_0,
                 k::weight_type::q4_k, k::weight_type::q6_k})
    if (s == k::name_of(c)) { *t = c; return true; }
  return false;
}

// Several copies of one [n_rows][n_cols] matrix so the working set is well beyond
// the last-level cache: every matvec streams its weights from DRAM.
struct weights {
  k::weight_type t;
  size_t row_bytes, matrix_bytes;
  std::vector<uint8_t*> copies;
  ~weights() { for (auto p : copies) std::free(p); }
};

void make_weights(weights& w, k::weight_type t, int64_t n_rows, int64_t n_cols, size_t min_total) {
  w.t = t;
  w.row_bytes = k::row_bytes(t, n_cols);
  w.matrix_bytes = w.row_bytes * static_cast<size_t>(n_rows);
  const size_t n_copies = std::max<size_t>(1, (min_total + w.matrix_bytes - 1) / w.matrix_bytes);
  auto* first = static_cast<uint8_t*>(std::aligned_alloc(64, (w.matrix_bytes + 63) / 64 * 64));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (auto& v : row) v = dist(rng);
    k::quantize_row(t, row.data(), first + static_cast<size_t>(r) * w.row_bytes, n_cols);
  }
  w.copies.push_back(first);
  for (size_t c = 1; c < n_copies; ++c) {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (w.matrix_bytes + 63) / 64 * 64));
    std::memcpy(p, first, w.matrix_bytes);
    w.copies.push_back(p);
  }
}

// Runs matmul over all copies round-robin with n_threads threads (rows split evenly,
// activations quantized once and shared) for about `seconds`; returns seconds per call.
double time_matmul(const weights& w, int64_t n_rows, int64_t n_cols, const std::vector<float>& x, int64_t n_x,
                   int n_threads, double seconds) {
  std::vector<float> y(static_cast<size_t>(n_x * n_rows));
  std::vector<uint8_t> qx(k::activation_bytes(w.t, n_cols, n_x));
  double best = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    // calls per trial: estimate from a first call
    int64_t n_calls = 0;
    {
      const auto t0 = std::chrono::steady_clock::now();
      k::quantize_activations(w.t, x.data(), n_cols, n_x, qx.data());
      k::matmul_prequantized(w.t, w.copies[0], w.row_bytes, n_cols, qx.data(), n_x, y.data(), 0, n_rows, n_rows);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      n_calls = std::max<int64_t>(static_cast<int64_t>(w.copies.size()),
                                  static_cast<int64_t>(seconds / 3 / std::max(s / n_threads, 1e-6)));
    }
    std::barrier sync(n_threads);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int th = 0; th < n_threads; ++th) {
      ts.emplace_back([&, th] {
        const int64_t rb = n_rows * th / n_threads, re = n_rows * (th + 1) / n_threads;
        for (int64_t c = 0; c < n_calls; ++c) {
          if (th == 0) k::quantize_activations(w.t, x.data(), n_cols, n_x, qx.data());
          sync.arrive_and_wait();
          k::matmul_prequantized(w.t, w.copies[static_cast<size_t>(c) % w.copies.size()], w.row_bytes, n_cols,
                                 qx.data(), n_x, y.data(), rb, re, n_rows);
          sync.arrive_and_wait();
        }
      });
    }
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / static_cast<double>(n_calls));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "missing value for %s\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--rows") o.n_rows = std::stoll(next());
    else if (a == "--cols") o.n_cols = std::stoll(next());
    else if (a == "--threads") o.n_threads = std::max(1, std::stoi(next()));
    else if (a == "--batch") o.n_batch = std::max<int64_t>(1, std::stoll(next()));
    else if (a == "--seconds") o.seconds = std::stod(next());
    else if (a == "--types") {
      o.types.clear();
      std::string s = next();
      for (size_t p = 0; p <= s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        k::weight_type t;
        if (!parse_type(s.substr(p, q - p), &t)) { std::fprintf(stderr, "unknown type %s\n", s.substr(p, q - p).c_str()); return 2; }
        o.types.push_back(t);
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: agentq-bench_kernels [--rows N] [--cols N] [--threads N] [--batch N] [--types a,b] [--seconds S]\n");
      return 2;
    }
  }
  if (o.n_cols % 256 != 0) { std::fprintf(stderr, "--cols must be a multiple of 256\n"); return 2; }

  std::vector<int> thread_counts;
  for (int t = 1; t <= o.n_threads; t *= 2) thread_counts.push_back(t);
  if (thread_counts.back() != o.n_threads) thread_counts.push_back(o.n_threads);

  std::vector<double> bw(thread_counts.size());
  for (size_t i = 0; i < thread_counts.size(); ++i) {
    bw[i] = k::measure_read_bandwidth_gbps(512u << 20, thread_counts[i]);
    std::printf("read bandwidth  threads %d  %.2f GB/s\n", thread_counts[i], bw[i]);
  }

  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(o.n_batch * o.n_cols));
  for (auto& v : x) v = dist(rng);

  std::string json = "{\"rows\":" + std::to_string(o.n_rows) + ",\"cols\":" + std::to_string(o.n_cols) + ",\"bandwidth_gbps\":{";
  for (size_t i = 0; i < thread_counts.size(); ++i)
    json += (i ? "," : "") + std::string("\"") + std::to_string(thread_counts[i]) + "\":" + std::to_string(bw[i]);
  json += "},\"matvec\":[";
  std::string prefill_json;
  bool first = true;
  std::printf("%-5s %7s %10s %9s %8s %12s %12s %8s\n", "type", "threads", "matvec_ms", "GB/s", "roofline",
              "decode_tok/s", "prefill_tok/s", "speedup");
  for (auto t : o.types) {
    weights w;
    make_weights(w, t, o.n_rows, o.n_cols, 256u << 20);
    for (size_t i = 0; i < thread_counts.size(); ++i) {
      const int nt = thread_counts[i];
      const double s1 = time_matmul(w, o.n_rows, o.n_cols, x, 1, nt, o.seconds);
      const double sb = time_matmul(w, o.n_rows, o.n_cols, x, o.n_batch, nt, o.seconds);
      const double gbps = static_cast<double>(w.matrix_bytes) / s1 / 1e9;
      const double frac = gbps / bw[i];
      const double speedup = (o.n_batch / sb) / (1.0 / s1);
      std::printf("%-5s %7d %10.3f %9.2f %7.1f%% %12.1f %12.1f %7.1fx\n", k::name_of(t), nt, s1 * 1e3, gbps, frac * 100,
                  1.0 / s1, o.n_batch / sb, speedup);
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "%s{\"type\":\"%s\",\"threads\":%d,\"gbps\":%.3f,\"roofline_frac\":%.4f,\"prefill_batch\":%lld,"
                    "\"prefill_speedup\":%.2f}",
                    first ? "" : ",", k::name_of(t), nt, gbps, frac, static_cast<long long>(o.n_batch), speedup);
      json += buf;
      first = false;
    }
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
