// agentq-bench_kernels: decode matvec and prefill matmul throughput per weight type
// against the measured streaming-read bandwidth (the roofline). Ends with one JSON line.
//   agentq-bench_kernels [--rows N] [--cols N] [--threads N] [--batch N] [--types f16,q8_0,...] [--trials N] [--clock cpu|wall]
//                        [--resident]
// --resident: one copy of the matrix, called 64 times a trial, so it stays in cache (size it with
// --rows / --cols to fit L2): the kernel's compute ceiling, without DRAM (llamacpp.sh's "bound").
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "agentq/kernels.h"

namespace k = agentq::kernels;

namespace {

struct options {
  int64_t n_rows = 4096, n_cols = 4096, n_batch = 64;
  int n_threads = 2;
  int n_trials = 8;      // best of
  bool cpu_clock = true;  // time by thread CPU clocks (robust on a shared host)
  bool resident = false;  // one copy, reused: the matrix stays in cache
  std::vector<k::weight_type> types = {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16,
                                       k::weight_type::q8_0, k::weight_type::q6_k, k::weight_type::q4_k,
                                       k::weight_type::q8_0_x8, k::weight_type::q4_k_x8, k::weight_type::q6_k_x8};
};

bool parse_type(const std::string& s, k::weight_type* t) {
  for (auto c : {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16, k::weight_type::q8_0,
                 k::weight_type::q4_k, k::weight_type::q6_k, k::weight_type::q8_0_x8, k::weight_type::q4_k_x8,
                 k::weight_type::q6_k_x8, k::weight_type::q4_0, k::weight_type::q4_1, k::weight_type::q5_0,
                 k::weight_type::q5_1, k::weight_type::q5_k, k::weight_type::mxfp4, k::weight_type::iq4_xs,
                 k::weight_type::q4_0_x16, k::weight_type::q5_k_x8, k::weight_type::iq4_xs_x8, k::weight_type::q2_k,
                 k::weight_type::q3_k, k::weight_type::q3_k_x8, k::weight_type::iq4_nl})
    if (s == k::name_of(c)) { *t = c; return true; }
  return false;
}

// Several copies of one [n_rows][n_cols] matrix so the working set is well beyond
// the last-level cache: every matvec streams its weights from DRAM.
// NOTE: in k::alloc_huge memory (2 MiB pages), as the engine's weights and the probe's buffer.
struct weights {
  k::weight_type t;
  size_t row_bytes, matrix_bytes;
  std::vector<uint8_t*> copies;
  size_t n_calls = 0;  // matvecs a trial, round-robin over the copies
  ~weights() { for (auto p : copies) k::free_huge(p, matrix_bytes); }
};

void make_weights(weights& w, k::weight_type t, int64_t n_rows, int64_t n_cols, size_t min_total) {
  w.t = t;
  w.row_bytes = k::row_bytes(t, n_cols);
  w.matrix_bytes = w.row_bytes * static_cast<size_t>(n_rows);
  const size_t n_copies = std::max<size_t>(1, (min_total + w.matrix_bytes - 1) / w.matrix_bytes);
  auto alloc = [&] {
    auto* p = static_cast<uint8_t*>(k::alloc_huge(w.matrix_bytes));
    if (!p) { std::fprintf(stderr, "out of memory\n"); std::exit(1); }
    return p;
  };
  auto* first = alloc();
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(n_cols));
  // _x8 (the engine's load-time layouts): quantized in the file type, then repacked.
  const k::weight_type file_t = k::file_type(t);
  std::vector<uint8_t> file(k::matrix_bytes(file_t, n_rows, n_cols));
  const size_t file_row = k::row_bytes(file_t, n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (auto& v : row) v = dist(rng);
    k::quantize_row(file_t, row.data(), file.data() + static_cast<size_t>(r) * file_row, n_cols);
  }
  k::repack(file_t, file.data(), n_rows, n_cols, t, first);
  w.copies.push_back(first);
  w.n_calls = min_total ? n_copies : 64;  // min_total 0: --resident
  for (size_t c = 1; c < n_copies; ++c) {
    auto* p = alloc();
    std::memcpy(p, first, w.matrix_bytes);
    w.copies.push_back(p);
  }
}

// A barrier whose waiters spin (yielding after a while), for wall-clock timing.
// NOTE: std::barrier sleeps in the kernel, and waking a thread in a VM took tens of
// microseconds, as long as a 2048x2048 Q4_K matvec: by wall clock 2 threads read no more
// than 1 (~11 GB/s on a Zen 1 host against ~22 by CPU clock).
class spin_barrier {
 public:
  explicit spin_barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    const int phase = phase_.load(std::memory_order_acquire);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      waiting_.store(0, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
      return;
    }
    for (int i = 0; phase_.load(std::memory_order_acquire) == phase; ++i) {
      if (i > (1 << 16)) std::this_thread::yield();
#if defined(__x86_64__)
      else _mm_pause();
#endif
    }
  }

 private:
  const int n_;
  std::atomic<int> waiting_{0}, phase_{0};
};

// Times matmul over all copies round-robin with n_threads threads (rows split
// evenly, activations quantized once per call and shared). One trial is one pass
// over every copy; returns the best trial's seconds per call.
// NOTE: best-of-trials, because the build host is shared: the best trial is the
// one least disturbed by other processes, which is what the roofline compares.
// By CPU clock the threads sleep at the barriers (waiting is not counted); by wall clock they
// spin, as the engine's pool does between a step's jobs.
template <class Barrier>
double time_matmul_with(const weights& w, int64_t n_rows, int64_t n_cols, const std::vector<float>& x, int64_t n_x,
                        int n_threads, int n_trials) {
  constexpr bool cpu_clock = std::is_same_v<Barrier, std::barrier<>>;
  std::vector<float> y(static_cast<size_t>(n_x * n_rows));
  std::vector<uint8_t> qx(k::activation_bytes(w.t, n_cols, n_x));
  const size_t n_calls = w.n_calls;
  double best = 1e30;
  std::vector<double> cpu(static_cast<size_t>(n_threads));
  Barrier sync(n_threads);
  std::vector<std::thread> ts;
  for (int th = 0; th < n_threads; ++th) {
    ts.emplace_back([&, th] {
      const int64_t rb = n_rows * th / n_threads, re = n_rows * (th + 1) / n_threads;
      for (int trial = 0; trial < n_trials; ++trial) {
        sync.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = k::thread_cpu_seconds();
        for (size_t c = 0; c < n_calls; ++c) {
          if (th == 0) k::quantize_activations(w.t, x.data(), n_cols, n_x, qx.data());
          sync.arrive_and_wait();
          k::matmul_prequantized(w.t, w.copies[c % w.copies.size()], w.row_bytes, n_cols, qx.data(), n_x, y.data(), rb, re, n_rows);
          sync.arrive_and_wait();
        }
        cpu[static_cast<size_t>(th)] = k::thread_cpu_seconds() - c0;
        sync.arrive_and_wait();
        if (th == 0) {
          double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (cpu_clock) s = *std::max_element(cpu.begin(), cpu.end());
          best = std::min(best, s / static_cast<double>(n_calls));
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  return best;
}

double time_matmul(const weights& w, int64_t n_rows, int64_t n_cols, const std::vector<float>& x, int64_t n_x,
                   int n_threads, int n_trials, bool cpu_clock) {
  return cpu_clock ? time_matmul_with<std::barrier<>>(w, n_rows, n_cols, x, n_x, n_threads, n_trials)
                   : time_matmul_with<spin_barrier>(w, n_rows, n_cols, x, n_x, n_threads, n_trials);
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
    else if (a == "--clock") o.cpu_clock = next() != "wall";
    else if (a == "--resident") o.resident = true;
    else if (a == "--trials") o.n_trials = std::max(1, std::stoi(next()));
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
      std::fprintf(stderr, "usage: agentq-bench_kernels [--rows N] [--cols N] [--threads N] [--batch N] [--types a,b] [--trials N] [--clock cpu|wall] [--resident]\n");
      return 2;
    }
  }
  if (o.n_cols % 256 != 0) { std::fprintf(stderr, "--cols must be a multiple of 256\n"); return 2; }

  std::vector<int> thread_counts;
  for (int t = 1; t <= o.n_threads; t *= 2) thread_counts.push_back(t);
  if (thread_counts.back() != o.n_threads) thread_counts.push_back(o.n_threads);

  // Bandwidth is re-measured next to every matvec measurement (best of all rounds),
  // so both see the same machine conditions.
  std::vector<double> bw(thread_counts.size(), 0.0);
  auto probe_bandwidth = [&](size_t i) {
    bw[i] = std::max(bw[i], (o.cpu_clock ? k::measure_read_bandwidth_cpu_gbps(256u << 20, thread_counts[i])
                                       : k::measure_read_bandwidth_gbps(256u << 20, thread_counts[i])));
  };
  for (size_t i = 0; i < thread_counts.size(); ++i) probe_bandwidth(i);

  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(o.n_batch * o.n_cols));
  for (auto& v : x) v = dist(rng);

  struct result { k::weight_type t; size_t i; double s1, sb, bytes; };
  std::vector<result> results;
  for (auto t : o.types) {
    weights w;
    make_weights(w, t, o.n_rows, o.n_cols, o.resident ? 0 : 256u << 20);
    for (size_t i = 0; i < thread_counts.size(); ++i) {
      const int nt = thread_counts[i];
      double s1 = 1e30;
      for (int round = 0; round < 3; ++round) {
        probe_bandwidth(i);
        s1 = std::min(s1, time_matmul(w, o.n_rows, o.n_cols, x, 1, nt, std::max(1, o.n_trials / 3), o.cpu_clock));
      }
      const double sb = time_matmul(w, o.n_rows, o.n_cols, x, o.n_batch, nt, 2, o.cpu_clock);
      results.push_back({t, i, s1, sb, static_cast<double>(w.matrix_bytes)});
      std::fprintf(stderr, "  measured %s threads %d\n", k::name_of(t), nt);
    }
  }

  for (size_t i = 0; i < thread_counts.size(); ++i)
    std::printf("read bandwidth  threads %d  %.2f GB/s (best of all probes)\n", thread_counts[i], bw[i]);
  std::printf("clock: %s\n", o.cpu_clock ? "thread cpu time" : "wall");
  std::printf("matvec %lld x %lld, prefill batch %lld\n", static_cast<long long>(o.n_rows),
              static_cast<long long>(o.n_cols), static_cast<long long>(o.n_batch));
  std::printf("%-5s %7s %10s %9s %8s %12s %13s %8s\n", "type", "threads", "matvec_ms", "GB/s", "roofline",
              "decode_tok/s", "prefill_tok/s", "speedup");
  std::string json = "{\"rows\":" + std::to_string(o.n_rows) + ",\"cols\":" + std::to_string(o.n_cols) +
                     ",\"prefill_batch\":" + std::to_string(o.n_batch) +
                     ",\"clock\":\"" + (o.cpu_clock ? "cpu" : "wall") + "\"" +
                     ",\"resident\":" + (o.resident ? "true" : "false") + ",\"bandwidth_gbps\":{";
  for (size_t i = 0; i < thread_counts.size(); ++i)
    json += (i ? "," : "") + std::string("\"") + std::to_string(thread_counts[i]) + "\":" + std::to_string(bw[i]);
  json += "},\"matvec\":[";
  for (size_t n = 0; n < results.size(); ++n) {
    const result& r = results[n];
    const double gbps = r.bytes / r.s1 / 1e9;
    const double frac = gbps / bw[r.i];
    const double speedup = (static_cast<double>(o.n_batch) / r.sb) / (1.0 / r.s1);
    std::printf("%-5s %7d %10.3f %9.2f %7.1f%% %12.1f %13.1f %7.1fx\n", k::name_of(r.t), thread_counts[r.i], r.s1 * 1e3,
                gbps, frac * 100, 1.0 / r.s1, static_cast<double>(o.n_batch) / r.sb, speedup);
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%s{\"type\":\"%s\",\"threads\":%d,\"gbps\":%.3f,\"roofline_frac\":%.4f,\"prefill_speedup\":%.2f}",
                  n ? "," : "", k::name_of(r.t), thread_counts[r.i], gbps, frac, speedup);
    json += buf;
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
