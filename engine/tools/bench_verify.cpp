// agentq-bench_verify: what a speculative verify pass costs in the matmuls, per weight layout:
// matmul_prequantized of one [rows][cols] matrix against n_x = 1..N inputs, in multiples of the
// one-input (decode) time. One thread, thread CPU clock (robust on a shared host), best of
// --trials passes over copies of the matrix filling 256 MiB (weights stream from memory, as in
// decode). Ends with one JSON line.
//   agentq-bench_verify [--rows 2048] [--cols 768] [--types q8_0_x8,q4_k_x8,q6_k_x8] [--max-inputs 9] [--trials 15]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "agentq/kernels.h"

namespace k = agentq::kernels;

namespace {

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

bool parse_type(const std::string& s, k::weight_type* t) {
  for (auto c : {k::weight_type::q8_0_x8, k::weight_type::q4_k_x8, k::weight_type::q6_k_x8, k::weight_type::q5_k_x8,
                 k::weight_type::iq4_xs_x8, k::weight_type::q4_0_x16, k::weight_type::q8_0, k::weight_type::q4_k,
                 k::weight_type::f16})
    if (s == k::name_of(c)) { *t = c; return true; }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 768;
  int max_inputs = 9, trials = 15;
  std::vector<k::weight_type> types = {k::weight_type::q8_0_x8, k::weight_type::q4_k_x8, k::weight_type::q6_k_x8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--rows") rows = std::atoll(v.c_str());
    else if (a == "--cols") cols = std::atoll(v.c_str());
    else if (a == "--max-inputs") max_inputs = std::max(1, std::atoi(v.c_str()));
    else if (a == "--trials") trials = std::max(1, std::atoi(v.c_str()));
    else if (a == "--types") {
      types.clear();
      for (size_t p = 0; p <= v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        k::weight_type t;
        if (!parse_type(v.substr(p, q - p), &t)) { std::fprintf(stderr, "unknown type %s\n", v.substr(p, q - p).c_str()); return 2; }
        types.push_back(t);
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: agentq-bench_verify [--rows N] [--cols N] [--types a,b] [--max-inputs N] [--trials N]\n");
      return 2;
    }
  }
  if (cols % 256 != 0 || rows % 16 != 0) { std::fprintf(stderr, "--cols must be a multiple of 256, --rows of 16\n"); return 2; }
  std::string json = "{\"bench\":\"verify\",\"rows\":" + std::to_string(rows) + ",\"cols\":" + std::to_string(cols) + ",\"cost\":{";
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (size_t ti = 0; ti < types.size(); ++ti) {
    const k::weight_type t = types[ti], ft = k::file_type(t);
    const size_t rb = k::row_bytes(t, cols), mb = rb * size_t(rows);
    std::vector<uint8_t> file(k::matrix_bytes(ft, rows, cols));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = dist(rng);
      k::quantize_row(ft, row.data(), file.data() + size_t(r) * k::row_bytes(ft, cols), cols);
    }
    std::vector<uint8_t*> copies;
    for (size_t c = 0; c < std::max<size_t>(1, (256u << 20) / mb); ++c) {
      auto* p = static_cast<uint8_t*>(k::alloc_huge(mb));
      if (!p) { std::fprintf(stderr, "out of memory\n"); return 1; }
      k::repack(ft, file.data(), rows, cols, t, p);
      copies.push_back(p);
    }
    std::vector<float> x(size_t(max_inputs) * size_t(cols)), y(size_t(max_inputs) * size_t(rows));
    for (auto& v : x) v = dist(rng) * 50;
    std::vector<uint8_t> qx(k::activation_bytes(t, cols, max_inputs));
    k::quantize_activations(t, x.data(), cols, max_inputs, qx.data());
    double one = 0;
    json += std::string(ti ? "," : "") + "\"" + k::name_of(t) + "\":[";
    for (int nx = 1; nx <= max_inputs; ++nx) {
      double best = 1e30;
      for (int trial = 0; trial < trials; ++trial) {
        const double c0 = thread_cpu();
        for (auto* w : copies) k::matmul_prequantized(t, w, rb, cols, qx.data(), nx, y.data(), 0, rows, rows);
        best = std::min(best, (thread_cpu() - c0) / double(copies.size()));
      }
      if (nx == 1) one = best;
      std::printf("%-9s %lldx%lld inputs %2d  %8.1f us  %5.2f matvecs  %5.2f per input\n", k::name_of(t), (long long)rows,
                  (long long)cols, nx, best * 1e6, best / one, best / one / nx);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.3f", nx > 1 ? "," : "", best / one);
      json += buf;
    }
    json += "]";
    for (auto* p : copies) k::free_huge(p, mb);
  }
  std::printf("%s}}\n", json.c_str());
  return 0;
}
