// The CUDA lane decoders (kernels/cuda/matvec_quants.cuh) on the CPU: every block format's decoder,
// run for each lane of a warp in turn with host stand-ins for the device helpers
// (tests/support/cuda_lanes_host.h), must give the CPU dequantizer's values bit for bit (what the
// GEMM's fp16 tiles are rounded from), cover each element once, and its row dot must match a
// double-precision dot and be the same per lane for 1 and 2 vectors. Checks the lane mappings and
// index math without a GPU; alignment, fp16 rounding and speed are the gpu tests' (gpu.cuda_gemm_quants).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_lanes_host.h"
// clang-format off
#include "../../kernels/cuda/matvec_quants.cuh"
// clang-format on

using namespace agentq::kernels;

namespace {

const weight_type block_types[] = {weight_type::q4_0, weight_type::q4_1, weight_type::q5_0,   weight_type::q5_1,
                                   weight_type::q8_0, weight_type::q2_k, weight_type::q3_k,   weight_type::q4_k,
                                   weight_type::q5_k, weight_type::q6_k, weight_type::iq4_nl, weight_type::iq4_xs,
                                   weight_type::mxfp4};

// Calls f(std::integral_constant-like tag) with lane_fmt<t>'s type as a template argument.
template <class F>
void with_type(weight_type t, F&& f) {
  switch (t) {
#define AGENTQ_CASE(T) \
  case weight_type::T: f.template operator()<weight_type::T>(); break;
    AGENTQ_CASE(q4_0) AGENTQ_CASE(q4_1) AGENTQ_CASE(q5_0) AGENTQ_CASE(q5_1) AGENTQ_CASE(q8_0) AGENTQ_CASE(q2_k)
    AGENTQ_CASE(q3_k) AGENTQ_CASE(q4_k) AGENTQ_CASE(q5_k) AGENTQ_CASE(q6_k) AGENTQ_CASE(iq4_nl) AGENTQ_CASE(iq4_xs)
    AGENTQ_CASE(mxfp4)
#undef AGENTQ_CASE
    default: FAIL("no lane decoder for ", name_of(t));
  }
}

// A row of n elements: quantized normal floats, or (raw) random bytes with every fp16 field random
// too (NaN and inf scales included: the comparison below is bitwise, on the same CPU).
std::vector<uint8_t> make_row(weight_type t, int64_t n, bool raw, std::mt19937& rng) {
  std::vector<uint8_t> w(row_bytes(t, n));
  for (auto& b : w) b = uint8_t(rng());
  if (!raw) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(n));
    for (auto& v : src) v = nd(rng);
    quantize_row(t, src.data(), w.data(), n);
  }
  return w;
}

}  // namespace

TEST_CASE("each lane decoder gives the CPU dequantizer's values bit for bit, every element once") {
  std::mt19937 rng(26);
  for (weight_type t : block_types) {
    for (bool raw : {false, true}) {
      for (int nb : {1, 3, 9}) {
        const int64_t n = int64_t(block_elems(t)) * nb;
        const auto w = make_row(t, n, raw, rng);
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0.0f);
        std::vector<int> hits(static_cast<size_t>(n), 0);
        dequantize_row(t, w.data(), want.data(), n);
        with_type(t, [&]<weight_type T>() {
          using F = cuda::detail::lane_fmt<T>;
          REQUIRE(F::elems == block_elems(t));
          REQUIRE(F::bytes == int(row_bytes(t, F::elems)));
          for (int64_t b = 0; b < nb; ++b)
            for (int part = 0; part < F::lanes; ++part)
              cuda::detail::dequant_lane<T>(w.data() + b * F::bytes, part, [&](int e, const float* v) {
                REQUIRE(e % 4 == 0);
                for (int k = 0; k < 4; ++k) {
                  got[size_t(b * F::elems + e + k)] = v[k];
                  ++hits[size_t(b * F::elems + e + k)];
                }
              });
        });
        int64_t bad = 0, unhit = 0;
        for (int64_t i = 0; i < n; ++i) {
          // NOTE: a NaN (raw bytes' NaN scales) may come out with the other sign: d * q + (-m) against
          // ggml's d * q - m. Every other value must be the same bits.
          const float a = got[size_t(i)], b = want[size_t(i)];
          const bool same = std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
          if (!same && bad < 3) MESSAGE(std::string(name_of(t)), " element ", i, ": ", a, " vs ", b);
          bad += !same;
          unhit += hits[size_t(i)] != 1;
        }
        CHECK_MESSAGE(unhit == 0, std::string(name_of(t)), " blocks ", nb, ": elements not written exactly once: ", unhit);
        CHECK_MESSAGE(bad == 0, std::string(name_of(t)), " blocks ", nb, std::string(raw ? " (raw bytes)" : ""), ": values differing: ", bad);
      }
    }
  }
}

TEST_CASE("each lane row dot sums to the dequantized dot, the same per lane for 1 and 2 vectors") {
  std::mt19937 rng(27);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (weight_type t : block_types) {
    for (int nb : {1, 3, 9, 33}) {
      const int64_t n = int64_t(block_elems(t)) * nb;
      const auto w = make_row(t, n, false, rng);
      std::vector<float> deq(static_cast<size_t>(n));
      dequantize_row(t, w.data(), deq.data(), n);
      std::vector<float> x(static_cast<size_t>(2 * n));
      for (auto& v : x) v = nd(rng);
      const float* xs[2] = {x.data(), x.data() + n};
      double got[2] = {0, 0};
      with_type(t, [&]<weight_type T>() {
        for (int lane = 0; lane < 32; ++lane) {
          float acc2[2] = {0, 0}, acc1[1] = {0};
          cuda::detail::quant_row_dot<T, 2>(w.data(), n, xs, lane, acc2);
          cuda::detail::quant_row_dot<T, 1>(w.data(), n, xs + 1, lane, acc1);
          CHECK_MESSAGE(std::memcmp(&acc1[0], &acc2[1], 4) == 0, std::string(name_of(t)), " lane ", lane, ": n_x changed the bits");
          got[0] += acc2[0];
          got[1] += acc2[1];
        }
      });
      for (int j = 0; j < 2; ++j) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < n; ++k) {
          want += double(deq[size_t(k)]) * xs[j][k];
          mag += std::fabs(double(deq[size_t(k)]) * xs[j][k]);
        }
        CHECK_MESSAGE(std::fabs(got[j] - want) <= 1e-5 * mag, std::string(name_of(t)), " blocks ", nb, ": ", got[j], " vs ", want);
      }
    }
  }
}
