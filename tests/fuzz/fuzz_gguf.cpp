// libFuzzer target: the GGUF reader over arbitrary bytes must never crash, hang
// or allocate beyond the input; a parsed file's accessors must be safe, and so must
// dequantizing a row of any weight type the kernels take (seeds: one per block format). The same
// bytes as a header alone (parse_header: what a control plane gets from a worker, #28) likewise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string err;
  if (auto h = agentq::gguf::file::parse_header({reinterpret_cast<const char*>(data), size}, &err)) {
    for (const auto& t : h->tensors())
      if (t.data) std::abort();  // a header has no tensor data
  }
  auto f = agentq::gguf::file::parse(data, size, &err);
  if (!f) return 0;
  for (const auto& [key, v] : f->metadata()) {
    if (v.is_array()) {
      for (uint64_t i = 0; i < v.n && i < 16; ++i) (void)v.at_f64(i);
    }
  }
  for (const auto& t : f->tensors()) {
    if (t.n_bytes > 0) (void)t.data[t.n_bytes - 1];
    const auto id = static_cast<uint32_t>(t.type);
    if (agentq::kernels::is_weight_type(id) && t.dims[0] <= 4096) {
      std::vector<float> row(static_cast<size_t>(t.dims[0]));
      agentq::kernels::dequantize_row(static_cast<agentq::kernels::weight_type>(id), t.data, row.data(), t.dims[0]);
    }
  }
  return 0;
}
