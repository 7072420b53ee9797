// agentq-bench_sampler: the host's sampling cost per token (one sequence's row of logits), the
// step every decode step pays once per sequence (a 128-sequence GPU step pays it 128 times).
// Each mode is timed against two baselines measured in the same run: the floor (one copy of
// the row, which each timed call also makes) and a full sort of the row's candidates (what
// the sampler did before it sorted only the prefix a walk reaches).
//   agentq-bench_sampler [--vocab 32000,128256] [--iters N]
// Logits: Gaussian noise (std 2) with a few tokens 8-12 above it, the shape of an LM's row.
// Ends with one JSON line: per vocabulary and mode, us_per_token and its ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sample/sampler.h"

using namespace agentq;

namespace {

std::vector<float> lm_row(int32_t n, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = noise(rng);
  for (int i = 0; i < 5; ++i) v[rng() % v.size()] += 8.0f + float(i);
  return v;
}

// Median microseconds per call of f over reps rounds of iters calls.
template <class F>
double median_us(int iters, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int32_t> vocabs = {32000, 128256};
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--vocab") && i + 1 < argc) {
      vocabs.clear();
      for (const char* p = argv[++i]; *p;) {
        vocabs.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else {
      std::fprintf(stderr, "usage: agentq-bench_sampler [--vocab 32000,128256] [--iters N]\n");
      return 2;
    }
  }
  struct mode {
    const char* name;
    sampling_params p;
  };
  std::vector<mode> modes(5);
  modes[0].name = "greedy";
  modes[4].name = "greedy+mask";  // an all-allowed grammar mask: the scalar scan (greedy's old path)
  modes[1].name = "temp0.8";
  modes[1].p.temperature = 0.8f;
  modes[2].name = "temp0.8+top_p0.95";
  modes[2].p.temperature = 0.8f;
  modes[2].p.top_p = 0.95f;
  modes[3].name = "temp0.8+top_k40";
  modes[3].p.temperature = 0.8f;
  modes[3].p.top_k = 40;

  std::mt19937 rng(7);
  std::string json = "{\"bench\":\"sampler\",\"results\":[";
  std::printf("%-8s %-18s | %10s | %9s %9s | %12s\n", "vocab", "mode", "us/token", "floor us", "x floor", "x full sort");
  bool first = true;
  for (int32_t n : vocabs) {
    const std::vector<float> row = lm_row(n, rng);
    std::vector<float> work(row.size());
    volatile float sink = 0;
    const double floor_us = median_us(iters, [&] {  // the copy every timed call below makes
      std::memcpy(work.data(), row.data(), row.size() * 4);
      sink = work[size_t(n) / 2];
    });
    std::vector<std::pair<float, int32_t>> cand(row.size());
    const double sort_us = median_us(std::max(1, iters / 4), [&] {
      for (size_t i = 0; i < row.size(); ++i) cand[i] = {row[i], int32_t(i)};
      std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      sink = cand[0].first;
    });
    const std::vector<uint32_t> all_allowed(size_t(n + 31) / 32, ~0u);
    for (const mode& m : modes) {
      sampler s(m.p);
      const bool masked = !std::strcmp(m.name, "greedy+mask");
      const double us = median_us(iters, [&] {
        std::memcpy(work.data(), row.data(), row.size() * 4);  // the sampler modifies its row
        sink = masked ? float(s.sample(work.data(), n, all_allowed)) : float(s.sample(work.data(), n));
      });
      std::printf("%-8d %-18s | %10.2f | %9.2f %9.1f | %12.3f\n", n, m.name, us, floor_us, us / floor_us,
                  us / sort_us);
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s{\"vocab\":%d,\"mode\":\"%s\",\"us_per_token\":%.3f,\"floor_us\":%.3f,\"full_sort_us\":%.3f,"
                    "\"ratio_floor\":%.3f,\"ratio_full_sort\":%.4f}",
                    first ? "" : ",", n, m.name, us, floor_us, sort_us, us / floor_us, us / sort_us);
      json += buf;
      first = false;
    }
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
