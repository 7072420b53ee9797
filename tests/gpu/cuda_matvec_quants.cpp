// The CUDA matvec's per-format row dots (kernels/cuda/matvec_quants.cuh: Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, MXFP4, Q5_K, IQ4_XS, Q2_K, Q3_K read their blocks' bytes directly) against the CPU
// scalar reference: the CPU library's dequantize_row (ggml's values bit for bit,
// unit.kernels_formats) and a double-precision dot. Shapes with odd block counts and row
// counts that leave a partial thread block; every lane mapping's remainder (fewer blocks than
// a warp step covers). Exits 77 (skipped) without a device or without CUDA.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"
#include "cuda_device_test.h"
#include "cuda_test_data.h"

#if AGENTQ_HAVE_CUDA

using namespace agentq;
namespace cu = agentq::kernels::cuda;
using cu::weight_type;
using test::from_device;
using test::require_device;
using test::to_device;

namespace {

const weight_type quant_types[] = {weight_type::q4_0, weight_type::q4_1, weight_type::q5_0,   weight_type::q5_1,
                                   weight_type::iq4_nl, weight_type::mxfp4, weight_type::q5_k, weight_type::iq4_xs,
                                   weight_type::q2_k, weight_type::q3_k};

// y[j][o] = dot(dequantize_row(row o), x[j]) in double, and the scale sum |w| . |x| per output.
void cpu_reference(weight_type t, const std::vector<uint8_t>& w, int64_t n_out, int64_t n_in, const std::vector<float>& x,
                   int32_t n_x, std::vector<double>& y, std::vector<double>& mag) {
  const auto kt = kernels::weight_type(uint32_t(t));
  const size_t rb = kernels::row_bytes(kt, n_in);
  std::vector<float> row(static_cast<size_t>(n_in));
  y.assign(size_t(n_x * n_out), 0.0);
  mag.assign(y.size(), 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    kernels::dequantize_row(kt, w.data() + size_t(o) * rb, row.data(), n_in);
    for (int32_t j = 0; j < n_x; ++j)
      for (int64_t k = 0; k < n_in; ++k) {
        const double p = double(row[size_t(k)]) * double(x[size_t(j * n_in + k)]);
        y[size_t(j * n_out + o)] += p;
        mag[size_t(j * n_out + o)] += std::fabs(p);
      }
  }
}

}  // namespace

TEST_CASE("per-format matvec row dots match the CPU scalar reference; batch-invariant; fused forms bitwise equal") {
  require_device();
  std::mt19937 rng(26);
  for (weight_type t : quant_types) {
    const int64_t be = kernels::block_elems(kernels::weight_type(uint32_t(t)));
    // 1 block (a warp step's remainder), odd counts, and a long row.
    for (int64_t n_blocks : {1, 3, 9, 33}) {
      const int64_t n_in = be * n_blocks, n_out = 37;
      const auto w = test::random_weights(t, n_out, n_in, rng);
      auto dw = to_device(w);
      for (int32_t n_x : {1, 3, 9}) {
        CAPTURE(int(t));
        CAPTURE(n_in);
        CAPTURE(n_x);
        const auto x = test::random_floats(size_t(n_x * n_in), rng);
        std::vector<double> want, mag;
        cpu_reference(t, w, n_out, n_in, x, n_x, want, mag);
        auto dx = to_device(x);
        cu::device_buffer dy(want.size() * 4);
        cu::matvec(t, dw.data(), n_out, n_in, dx.as<float>(), n_x, dy.as<float>(), nullptr);
        const auto got = from_device<float>(dy, want.size());
        // fp32 products summed in fp32 (per lane, then the warp): relative to sum |w x|.
        for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(double(got[i]) - want[i]) <= 2e-5 * mag[i] + 1e-30);
        if (n_x > 1) {  // the first vector alone: bitwise the same rows
          cu::device_buffer dy1(size_t(n_out) * 4);
          cu::matvec(t, dw.data(), n_out, n_in, dx.as<float>(), 1, dy1.as<float>(), nullptr);
          const auto one = from_device<float>(dy1, size_t(n_out));
          REQUIRE(std::memcmp(one.data(), got.data(), one.size() * 4) == 0);
        }
        // Residual accumulate (wo / ffn_down) and gate/up SwiGLU: the same dots, bitwise.
        auto acc = to_device(std::vector<float>(want.size(), 0.0f));
        const cu::matvec_segment seg{dw.data(), acc.as<float>(), n_out};
        cu::matvec_multi(t, &seg, 1, n_in, dx.as<float>(), n_x, true, nullptr);
        const auto accumulated = from_device<float>(acc, want.size());
        REQUIRE(std::memcmp(accumulated.data(), got.data(), got.size() * 4) == 0);
        cu::device_buffer dsw(want.size() * 4);
        cu::matvec_swiglu(t, dw.data(), dw.data(), n_out, n_in, dx.as<float>(), n_x, dsw.as<float>(), nullptr);
        const auto sw = from_device<float>(dsw, want.size());
        for (size_t i = 0; i < sw.size(); ++i) {
          const float g = got[i];
          const float expect = g / (1.0f + std::exp(-g)) * g;
          REQUIRE(std::fabs(sw[i] - expect) <= 1e-6f * (std::fabs(expect) + 1e-20f));
        }
      }
    }
  }
  CHECK_FALSE(cu::cuda_failed());
}

#else  // built without the CUDA backend

TEST_CASE("cuda matvec quants: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
