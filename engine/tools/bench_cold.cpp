// agentq-bench_cold: what a forward costs right after other work or an idle gap, beside the same
// forward back to back (docs/queue_perf.md "Session 24 (branch `queue10c`)"). In the service each
// job's forward runs between HTTP, SQLite and Redis work on the same cores; a forward that is
// slower "cold" is paid on every job.
//   agentq-bench_cold [--pp 24] [--past 0] [--seqs 1] [--n 400] [--gaps none,spin:30000,...] [--curve] MODEL.gguf
// Each timed forward computes --seqs sequences of --pp tokens after --past cached positions (a
// batch of one-request jobs whose shared prompt head the prefix cache holds: --seqs 8 --pp 13 --past 11,
// job_model_floor.py's one_request_in_service).
// Gaps, run before each timed forward (modes interleaved round-robin, so host load hits all alike):
//   none        right after the previous gap's timed forward
//   warm:N      N forwards first (back to back: the steady state of a loop of forwards)
//   spin:US     a scalar integer loop for US microseconds (no memory traffic, no vector unit)
//   fma:US      a 256-bit FMA loop for US microseconds (vector units kept busy)
//   sleep:US    nanosleep(US): the thread idles (the core may halt, the vCPU be descheduled)
//   thrash:KB   read-modify-write KB of a private buffer (evicts caches and TLB entries)
//   branches:US 4,096 distinct data-dependent branches over and over for US microseconds (the
//               branch predictor's tables refilled, ~50 KB of code, no data)
//   l2:US       re-read 256 KiB (L2-resident) for US microseconds; l1:US the same over 16 KiB
//   A+B         step A, then step B ("spin:10000+warm:2": two untimed forwards after the spin)
// --curve: instead of forwards, time 40 slices of the FMA loop (14,400 256-bit FMAs: 7,200 cycles at
// 2 a cycle) after each gap; prints each slice's median ns, which shows how long a warm-up (if
// any) lasts. --curve-adds: the same with a dependent chain of 28,800 integer adds (1 a cycle):
// the core's clock. AGENTQ_COLD_SLICE_ITERS=N: N rounds a slice (default 1,800) for a longer curve.
// Per gap: median / p10 / p90 wall ms of the forward, thread CPU ms, minor faults and involuntary
// context switches per forward. Ends with one JSON line.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "agentq/engine.h"
#include "backend/backend.h"
#include "gguf/reader.h"

namespace {

using namespace agentq;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e6 * double(ts.tv_sec) + 1e-3 * double(ts.tv_nsec);
}

struct gap {
  std::string name;
  std::vector<double> wall_us, cpu_us, faults, invol;
  std::vector<double> wall_us_alone, wall_us_switched;  // split by: the thread was switched out during the gap
  std::vector<std::vector<double>> slices;  // --curve: [slice][sample] ns
};

volatile uint64_t g_sink;

// A dependent scalar chain: no loads or stores, no vector instructions.
void spin_scalar(double us) {
  const double end = now_us() + us;
  uint64_t x = 88172645463325252ull;
  while (now_us() < end)
    for (int i = 0; i < 256; ++i) x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  g_sink = x;
}

// n_iter rounds of 8 independent 256-bit FMA chains (enough to fill both FMA pipes).
void fma_iters(long n_iter) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 a[8];
  for (int j = 0; j < 8; ++j) a[j] = _mm256_set1_ps(1.0f + 0.001f * float(j));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < n_iter; ++i)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  __m256 s = a[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_ps(s, a[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  g_sink = uint64_t(out[0]);
#else
  g_sink = uint64_t(n_iter);
#endif
}

// n_iter rounds of one dependent chain of 8 integer adds (1 cycle each): a clock, in cycles.
void add_chain(long n_iter) {
  uint64_t x = g_sink;
  for (long i = 0; i < n_iter; ++i) {
    asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                 : "+r"(x));
  }
  g_sink = x;
}

// 4,096 distinct conditional branches on pseudo-random bits (the asm keeps each a real branch):
// run over and over, they refill the branch predictor's tables with other branches' history
// while touching almost no data (~50 KB of code).
template <int N>
inline void branch_sites(uint64_t& x, uint64_t& acc) {
  if constexpr (N > 0) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if ((x >> 33) & 1) asm volatile("add %1, %0" : "+r"(acc) : "i"(N));
    branch_sites<N - 1>(x, acc);
  }
}

template <int B>
__attribute__((noinline)) void branch_block(uint64_t& x, uint64_t& acc) {
  branch_sites<256>(x, acc);
}

template <int... B>
void branch_blocks(uint64_t& x, uint64_t& acc, std::integer_sequence<int, B...>) {
  (branch_block<B>(x, acc), ...);
}

void spin_branches(double us) {
  const double end = now_us() + us;
  uint64_t x = 1, acc = 0;
  while (now_us() < end) branch_blocks(x, acc, std::make_integer_sequence<int, 16>{});
  g_sink = acc;
}

void spin_fma(double us) {
  const double end = now_us() + us;
  while (now_us() < end) fma_iters(64);
}

void run_step(const std::string& kind, long arg, std::vector<uint8_t>& buf, const std::function<void()>& forward) {
  if (kind == "warm") {
    for (long i = 0; i < arg; ++i) forward();
  } else if (kind == "spin") {
    spin_scalar(double(arg));
  } else if (kind == "fma") {
    spin_fma(double(arg));
  } else if (kind == "branches") {
    spin_branches(double(arg));
  } else if (kind == "sleep") {
    timespec ts{arg / 1000000, (arg % 1000000) * 1000};
    nanosleep(&ts, nullptr);
  } else if (kind == "l2" || kind == "l1") {  // re-read a 256 KiB (16 KiB) part of buf for arg us
    const size_t n = kind == "l2" ? size_t(256) << 10 : size_t(16) << 10;
    const double end = now_us() + double(arg);
    uint64_t sum = 0;
    while (now_us() < end)
      for (size_t i = 0; i < n; i += 64) sum += buf[i];
    g_sink = sum;
  } else if (kind == "thrash") {
    const size_t n = std::min(buf.size(), size_t(arg) * 1024);
    for (size_t i = 0; i < n; i += 64) buf[i] = uint8_t(buf[i] + 1);
  }
}

// A gap is steps joined by '+' ("spin:10000+warm:1"), run in order.
void run_gap(const gap& g, std::vector<uint8_t>& buf, const std::function<void()>& forward) {
  std::stringstream ss(g.name);
  std::string step;
  while (std::getline(ss, step, '+')) {
    const size_t c = step.find(':');
    run_step(step.substr(0, c), c == std::string::npos ? 0 : std::atol(step.c_str() + c + 1), buf, forward);
  }
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

double load1() {
  double l = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = 0;
    std::fclose(f);
  }
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  int32_t n_pp = 24, n_rounds = 400, n_past = 0, n_seqs = 1;
  std::string gaps_arg = "none,spin:30000,fma:30000,sleep:1000,sleep:30000,thrash:65536";
  bool curve = false, curve_adds = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--pp"))
      n_pp = std::atoi(argv[++i]);
    else if (arg("--past"))
      n_past = std::atoi(argv[++i]);
    else if (arg("--seqs"))
      n_seqs = std::atoi(argv[++i]);
    else if (arg("--n"))
      n_rounds = std::atoi(argv[++i]);
    else if (arg("--gaps"))
      gaps_arg = argv[++i];
    else if (!std::strcmp(argv[i], "--curve"))
      curve = true;
    else if (!std::strcmp(argv[i], "--curve-adds"))
      curve = curve_adds = true;
    else if (argv[i][0] == '-' || !path.empty()) {
      std::fprintf(stderr, "usage: agentq-bench_cold [--pp 24] [--past 0] [--seqs 1] [--n 400] [--gaps none,spin:US,...] [--curve] MODEL\n");
      return 2;
    } else
      path = argv[i];
  }
  std::vector<gap> gaps;
  {
    std::stringstream ss(gaps_arg);
    std::string item;
    while (std::getline(ss, item, ',')) {
      gap g;
      g.name = item;
      gaps.push_back(std::move(g));
    }
  }
  std::string err;
  std::shared_ptr<const gguf::file> file = gguf::file::open(path, &err);
  auto mdl = file ? forward_backend::create("cpu", file, 1, &err) : nullptr;
  // Each sequence its own blocks: n_past cached positions (written once, below), then the n_pp
  // positions every timed forward computes again (the same tokens, so the same work each time).
  const int32_t n_blocks_seq = (n_past + n_pp + 63) / 64;
  if (n_pp <= 0 || n_past < 0 || n_seqs <= 0 || !mdl || !mdl->alloc_kv(64, n_blocks_seq * n_seqs, &err)) {
    std::fprintf(stderr, "bench_cold: %s\n", err.empty() ? "bad --pp / --past / --seqs" : err.c_str());
    return 1;
  }
  const model_hparams& hp = mdl->hparams();
  std::vector<int32_t> table(size_t(n_blocks_seq * n_seqs));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  std::vector<float> logits(size_t(hp.n_vocab) * size_t(n_seqs));
  std::vector<token_id> tokens(static_cast<size_t>(n_past + n_pp) * size_t(n_seqs));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = token_id((int64_t(i) * 7919 + 13) % hp.n_vocab);
  std::vector<batch_seq> prefix, batch;
  for (int32_t q = 0; q < n_seqs; ++q) {
    const int32_t* bt = table.data() + size_t(q * n_blocks_seq);
    const token_id* tk = tokens.data() + size_t(q) * size_t(n_past + n_pp);
    if (n_past > 0) prefix.push_back({bt, 0, tk, n_past, false});
    batch.push_back({bt, n_past, tk + n_past, n_pp, false});
  }
  if (!prefix.empty()) mdl->forward(prefix, logits.data());
  const std::function<void()> forward = [&] { mdl->forward(batch, logits.data()); };
  for (int i = 0; i < 20; ++i) forward();  // warm-up

  std::vector<uint8_t> buf(size_t(256) << 20, 1);  // thrash: up to 256 MiB, paged in here
  constexpr int k_slices = 40;
  // ~5 us of the FMA loop at full rate (2 FMA/cycle at ~3 GHz: 8 chains x 64 rounds = 512 FMAs per 170 ns).
  long slice_iters = 1800;
  if (const char* e = std::getenv("AGENTQ_COLD_SLICE_ITERS")) slice_iters = std::max(1L, std::atol(e));
  const double load_before = load1();
  for (int32_t r = 0; r < n_rounds; ++r) {
    for (gap& g : gaps) {
      rusage ug0, ug1;
      getrusage(RUSAGE_THREAD, &ug0);
      run_gap(g, buf, forward);
      getrusage(RUSAGE_THREAD, &ug1);
      // Was this thread switched out during the gap (preempted or slept)? Then another task may
      // have run on its core.
      const bool gap_switched = ug1.ru_nivcsw + ug1.ru_nvcsw > ug0.ru_nivcsw + ug0.ru_nvcsw;
      if (curve) {
        if (g.slices.empty()) g.slices.resize(k_slices);
        for (int k = 0; k < k_slices; ++k) {
          const double t0 = now_us();
          if (curve_adds)
            add_chain(slice_iters * 2);  // 8 x 3,600 dependent adds: 28,800 cycles
          else
            fma_iters(slice_iters);
          g.slices[size_t(k)].push_back(1e3 * (now_us() - t0));
        }
        continue;
      }
      rusage u0, u1;
      getrusage(RUSAGE_THREAD, &u0);
      const double t0 = now_us(), c0 = thread_cpu_us();
      forward();
      const double t1 = now_us(), c1 = thread_cpu_us();
      getrusage(RUSAGE_THREAD, &u1);
      g.wall_us.push_back(t1 - t0);
      (gap_switched ? g.wall_us_switched : g.wall_us_alone).push_back(t1 - t0);
      g.cpu_us.push_back(c1 - c0);
      g.faults.push_back(double(u1.ru_minflt - u0.ru_minflt));
      g.invol.push_back(double(u1.ru_nivcsw - u0.ru_nivcsw));
    }
  }
  const double load_after = load1();
  std::fprintf(stderr, "bench_cold: %s, %d seqs x %d tokens after %d, %d rounds, load %.2f -> %.2f\n", path.c_str(),
               n_seqs, n_pp, n_past, n_rounds,
               load_before, load_after);
  std::string json = "{\"bench\":\"cold_forward\",\"pp\":" + std::to_string(n_pp) +
                     ",\"past\":" + std::to_string(n_past) + ",\"seqs\":" + std::to_string(n_seqs) +
                     ",\"rounds\":" + std::to_string(n_rounds) + ",\"load1\":[" + std::to_string(load_before) + "," +
                     std::to_string(load_after) + "],\"gaps\":[";
  char line[512];
  for (size_t i = 0; i < gaps.size(); ++i) {
    const gap& g = gaps[i];
    if (curve) {
      std::string sl;
      std::fprintf(stderr, "%-14s FMA slice ns (median):", g.name.c_str());
      for (int k = 0; k < k_slices; ++k) {
        const double m = pct(g.slices[size_t(k)], 0.5);
        std::fprintf(stderr, " %.0f", m);
        sl += (k ? "," : "") + std::to_string(int(m));
      }
      std::fprintf(stderr, "\n");
      json += std::string(i ? "," : "") + "{\"gap\":\"" + g.name + "\",\"slice_ns\":[" + sl + "]}";
      continue;
    }
    std::snprintf(line, sizeof line,
                  "%s{\"gap\":\"%s\",\"wall_ms\":{\"p10\":%.4f,\"median\":%.4f,\"p90\":%.4f},\"cpu_ms_median\":%.4f,"
                  "\"minor_faults_per_forward\":%.3f,\"involuntary_switches_per_forward\":%.3f}",
                  i ? "," : "", g.name.c_str(), pct(g.wall_us, 0.1) / 1e3, pct(g.wall_us, 0.5) / 1e3,
                  pct(g.wall_us, 0.9) / 1e3, pct(g.cpu_us, 0.5) / 1e3,
                  [&] {
                    double t = 0;
                    for (double f : g.faults) t += f;
                    return t / double(g.faults.size());
                  }(),
                  [&] {
                    double t = 0;
                    for (double f : g.invol) t += f;
                    return t / double(g.invol.size());
                  }());
    json += line;
    std::fprintf(stderr,
                 "%-22s wall ms p10 %.3f median %.3f p90 %.3f | cpu ms median %.3f | median after a gap alone %.3f "
                 "(%zu), switched out %.3f (%zu)\n",
                 g.name.c_str(), pct(g.wall_us, 0.1) / 1e3, pct(g.wall_us, 0.5) / 1e3, pct(g.wall_us, 0.9) / 1e3,
                 pct(g.cpu_us, 0.5) / 1e3, pct(g.wall_us_alone, 0.5) / 1e3, g.wall_us_alone.size(),
                 pct(g.wall_us_switched, 0.5) / 1e3, g.wall_us_switched.size());
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
