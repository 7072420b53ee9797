// cuBLAS is opened at its first use, not at the process's start (kernels/cuda/gemm.cu): a process of a
// CUDA build that makes no cuBLAS handle maps neither libcublas nor libcublasLt (whose initializers
// cost ~0.3 s and ~200 MB at every start); cublas_load_error() opens it and resolves every entry
// point gemm.cu calls. Needs no device. Exits 77 (skipped) when built without CUDA.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "agentq/kernels_cuda.h"

#if AGENTQ_HAVE_CUDA

namespace {
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("cuBLAS: not mapped at the process's start; opened, every entry point resolved, at first use") {
  CHECK_FALSE(mapped("libcublas"));
  const std::string error = agentq::kernels::cuda::cublas_load_error();
  CHECK_MESSAGE(error.empty(), error);
  CHECK(mapped("libcublas.so"));
  CHECK(mapped("libcublasLt.so"));
  CHECK(agentq::kernels::cuda::cublas_load_error() == error);  // opened once
}

#else  // built without the CUDA backend

TEST_CASE("cuBLAS load: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
