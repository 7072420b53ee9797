// kernels/cuda/matvec_quants.cuh's per-format row dots run on the CPU, the 32 lanes of a warp one
// after another (common.cuh here stands in for the device helpers), against the CPU library's
// dequantize_row and a double dot: checks the lane mappings and index math without a GPU.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "matvec_quants.cuh"
using namespace agentq::kernels;
int main() {
  std::mt19937 rng(5);
  const weight_type types[] = {weight_type::q4_0, weight_type::q4_1, weight_type::q5_0, weight_type::q5_1, weight_type::iq4_nl,
                               weight_type::mxfp4, weight_type::q5_k, weight_type::iq4_xs, weight_type::q2_k, weight_type::q3_k};
  int bad = 0;
  for (auto t : types) {
    for (int nb : {1, 3, 9, 33}) {
      const int64_t n = block_elems(t) * nb;
      std::vector<uint8_t> w(row_bytes(t, n));
      for (auto& b : w) b = uint8_t(rng());
      // sane fp16 scales: overwrite by quantizing random floats where a quantizer exists
      std::vector<float> src(n); std::normal_distribution<float> nd(0, 1); for (auto& v : src) v = nd(rng);
      if (has_quantizer(t)) quantize_row(t, src.data(), w.data(), n);
      std::vector<float> deq(n); dequantize_row(t, w.data(), deq.data(), n);
      const int NX = 2;
      std::vector<float> x(NX * n); for (auto& v : x) v = nd(rng);
      const float* xs[NX] = {x.data(), x.data() + n};
      double got[NX] = {0, 0};
      for (int lane = 0; lane < 32; ++lane) {
        float acc[NX] = {0, 0};
        switch (t) {
#define C(T) case weight_type::T: cuda::detail::quant_row_dot<weight_type::T, NX>(w.data(), n, xs, lane, acc); break;
          C(q4_0) C(q4_1) C(q5_0) C(q5_1) C(iq4_nl) C(mxfp4) C(q5_k) C(iq4_xs) C(q2_k) C(q3_k)
          default: break;
        }
        for (int j = 0; j < NX; ++j) got[j] += acc[j];
      }
      for (int j = 0; j < NX; ++j) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < n; ++k) { want += double(deq[k]) * xs[j][k]; mag += std::fabs(double(deq[k]) * xs[j][k]); }
        const double err = std::fabs(got[j] - want) / (mag + 1e-30);
        if (err > 1e-5) { ++bad; std::printf("BAD %s nb %d j %d got %g want %g rel %g\n", name_of(t), nb, j, got[j], want, err); }
      }
    }
    std::printf("%s done\n", name_of(t));
  }
  std::printf("bad %d\n", bad);
  return bad != 0;
}
