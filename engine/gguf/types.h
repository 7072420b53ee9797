// ggml tensor types as GGUF stores them: ids, names, block geometry.
// The engine computes with a subset (see is_supported); the rest are named so
// a refusal can say which type a file uses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace agentq::gguf {

enum class tensor_type : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21,
  iq2_s = 22, iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28,
  iq1_m = 29, bf16 = 30, tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
};

struct type_traits {
  const char* name;      // "Q4_K"; nullptr for an id no known ggml version uses
  int32_t block_size;    // elements per block
  int32_t type_size;     // bytes per block
};

// Traits for a raw type id; name == nullptr when the id is unknown.
type_traits traits_of(uint32_t type_id);
inline type_traits traits_of(tensor_type t) { return traits_of(static_cast<uint32_t>(t)); }
inline const char* name_of(tensor_type t) { auto n = traits_of(t).name; return n ? n : "unknown"; }

// Weight types the engine's kernels implement.
bool is_supported(tensor_type t);

}  // namespace agentq::gguf
