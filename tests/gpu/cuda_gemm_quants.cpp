// The CUDA prefill GEMM for every weight type: the fp16 tiles dequantize_f16 writes (kernels/cuda/
// dequantize.cu, the matvec's lane decoders) must be the CPU dequantizer's values rounded to fp16, bit
// for bit, for any row offset; gemm() (cuBLAS on those tiles) must match a double-precision dot within
// the fp16 roundings of weights and activations, also when the matrix spans several tiles.
// The decoders' index math is also checked without a device (unit.cuda_lanes). Exits 77 (skipped)
// without a device or without CUDA.
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

const weight_type block_types[] = {weight_type::q4_0, weight_type::q4_1, weight_type::q5_0,   weight_type::q5_1,
                                   weight_type::q8_0, weight_type::q2_k, weight_type::q3_k,   weight_type::q4_k,
                                   weight_type::q5_k, weight_type::q6_k, weight_type::iq4_nl, weight_type::iq4_xs,
                                   weight_type::mxfp4};
const weight_type all_types[] = {weight_type::f32,  weight_type::f16,  weight_type::bf16,   weight_type::q4_0,
                                 weight_type::q4_1, weight_type::q5_0, weight_type::q5_1,   weight_type::q8_0,
                                 weight_type::q2_k, weight_type::q3_k, weight_type::q4_k,   weight_type::q5_k,
                                 weight_type::q6_k, weight_type::iq4_nl, weight_type::iq4_xs, weight_type::mxfp4};

kernels::weight_type cpu_type(weight_type t) { return kernels::weight_type(uint32_t(t)); }

// Rows [row0, row0 + n_rows) of w dequantized by the CPU library (ggml's values).
std::vector<float> cpu_rows(weight_type t, const std::vector<uint8_t>& w, int64_t row0, int64_t n_rows, int64_t n_in) {
  const size_t rb = kernels::row_bytes(cpu_type(t), n_in);
  std::vector<float> out(static_cast<size_t>(n_rows * n_in));
  for (int64_t r = 0; r < n_rows; ++r)
    kernels::dequantize_row(cpu_type(t), w.data() + size_t(row0 + r) * rb, out.data() + r * n_in, n_in);
  return out;
}

// gemm() on the device against a double dot of the CPU-dequantized rows [row0, n_out), relative to
// sum |w x| per output.
void check_gemm(void* blas, weight_type t, int64_t n_out, int64_t n_in, int32_t n_x, int64_t row0, double tol,
                std::mt19937& rng) {
  CAPTURE(int(t));
  CAPTURE(n_out);
  CAPTURE(n_in);
  CAPTURE(n_x);
  const auto w = test::random_weights(t, n_out, n_in, rng);
  const auto x = test::random_floats(size_t(n_x) * size_t(n_in), rng);
  auto dw = to_device(w), dx = to_device(x);
  cu::device_buffer dy(size_t(n_x) * size_t(n_out) * 4), scratch(cu::gemm_scratch_bytes(t, n_out, n_in, n_x) + 16);
  REQUIRE(cu::gemm(blas, t, dw.data(), n_out, n_in, dx.as<float>(), n_x, dy.as<float>(), scratch.data(), nullptr));
  const auto got = from_device<float>(dy, size_t(n_x) * size_t(n_out));
  const auto rows = cpu_rows(t, w, row0, n_out - row0, n_in);
  int64_t bad = 0;
  for (int32_t j = 0; j < n_x; ++j)
    for (int64_t o = row0; o < n_out; ++o) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        const double p = double(rows[size_t((o - row0) * n_in + k)]) * double(x[size_t(j * n_in + k)]);
        want += p;
        mag += std::fabs(p);
      }
      const double err = std::fabs(double(got[size_t(j * n_out + o)]) - want);
      if (err > tol * mag + 1e-30 && bad++ < 3)
        MESSAGE("x ", j, " row ", o, ": ", got[size_t(j * n_out + o)], " vs ", want, " (sum |w x| ", mag, ")");
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("dequantize_f16: every block format's tile is the CPU dequantizer's values rounded to fp16") {
  require_device();
  std::mt19937 rng(31);
  for (weight_type t : block_types) {
    const int64_t be = kernels::block_elems(cpu_type(t));
    for (int64_t n_blocks : {1, 3, 9}) {
      const int64_t n_in = be * n_blocks, n_rows = 37;
      CAPTURE(int(t));
      CAPTURE(n_in);
      const auto w = test::random_weights(t, n_rows, n_in, rng);
      auto dw = to_device(w);
      // All rows, and a tile that starts inside the matrix (row0 = 5) and leaves rows after it.
      for (const auto& [row0, m] : {std::pair<int64_t, int64_t>{0, n_rows}, {5, 29}}) {
        cu::device_buffer tile(size_t(m * n_in) * 2);
        cu::dequantize_f16(t, dw.data(), row0, m, n_in, tile.data(), nullptr);
        const auto got = from_device<uint16_t>(tile, size_t(m * n_in));
        const auto want = cpu_rows(t, w, row0, m, n_in);
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const uint16_t h = kernels::fp32_to_fp16(want[i]);
          if (got[i] != h && bad++ < 3) MESSAGE("element ", i, ": ", got[i], " vs ", h, " (", want[i], ")");
        }
        CHECK_MESSAGE(bad == 0, "row0 ", row0, ": ", bad, " values differ");
      }
    }
  }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("gemm: every weight type against a double dot of the CPU-dequantized rows") {
  require_device();
  std::mt19937 rng(32);
  void* blas = cu::cublas_create(nullptr);
  REQUIRE(blas);
  for (weight_type t : all_types) {
    // Weights (block formats: after dequantizing) and activations are rounded to fp16 (bf16 for BF16
    // weights: 8 bits of mantissa), each product by up to ~2 roundings of its inputs; F32 is fp32.
    const double tol = t == weight_type::f32 ? 1e-4 : t == weight_type::bf16 ? 1.6e-2 : 2e-3;
    const int64_t be = kernels::block_elems(cpu_type(t)) < 32 ? 32 : kernels::block_elems(cpu_type(t));
    for (int64_t n_blocks : {2, 9})
      for (int32_t n_x : {17, 64}) check_gemm(blas, t, 300, be * n_blocks, n_x, 0, tol, rng);
  }
  cu::cublas_destroy(blas);
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("gemm: a matrix of several dequantized tiles (the rows past the first tile)") {
  require_device();
  std::mt19937 rng(33);
  void* blas = cu::cublas_create(nullptr);
  REQUIRE(blas);
  // gemm.cu's tiles hold 2^24 elements: 4096 rows at 4096 columns, so 4100 rows take two.
  for (weight_type t : {weight_type::q4_k, weight_type::q6_k, weight_type::q4_0})
    check_gemm(blas, t, 4100, 4096, 5, 4090, 2e-3, rng);
  cu::cublas_destroy(blas);
  CHECK_FALSE(cu::cuda_failed());
}

#else  // built without the CUDA backend

TEST_CASE("cuda gemm quants: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
