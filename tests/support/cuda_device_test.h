// Device-side helpers of the gpu tests: skip (exit 77) without a CUDA device, and copy vectors to
// and from device buffers with the transfer checked.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "agentq/kernels_cuda.h"

#if AGENTQ_HAVE_CUDA

namespace agentq::test {

inline void require_device() {
  static const bool ok = kernels::cuda::device_count() > 0;
  if (!ok) {
    std::fprintf(stderr, "no CUDA device: skipped\n");
    std::exit(77);
  }
}

template <class T>
kernels::cuda::device_buffer to_device(const std::vector<T>& v) {
  kernels::cuda::device_buffer b(v.size() * sizeof(T) + 16);  // never empty
  REQUIRE(b.ok());
  REQUIRE(b.upload(v.data(), v.size() * sizeof(T)));
  return b;
}

template <class T>
std::vector<T> from_device(const kernels::cuda::device_buffer& b, size_t n) {
  REQUIRE(kernels::cuda::device_synchronize());
  std::vector<T> v(n);
  REQUIRE(b.download(v.data(), n * sizeof(T)));
  return v;
}

}  // namespace agentq::test

#endif
