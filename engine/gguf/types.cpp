// Table of ggml type geometry (matches ggml's type_traits for these ids).
#include "gguf/types.h"

namespace agentq::gguf {

type_traits traits_of(uint32_t id) {
  switch (id) {
    case 0: return {"F32", 1, 4};
    case 1: return {"F16", 1, 2};
    case 2: return {"Q4_0", 32, 18};
    case 3: return {"Q4_1", 32, 20};
    case 6: return {"Q5_0", 32, 22};
    case 7: return {"Q5_1", 32, 24};
    case 8: return {"Q8_0", 32, 34};
    case 9: return {"Q8_1", 32, 36};
    case 10: return {"Q2_K", 256, 84};
    case 11: return {"Q3_K", 256, 110};
    case 12: return {"Q4_K", 256, 144};
    case 13: return {"Q5_K", 256, 176};
    case 14: return {"Q6_K", 256, 210};
    case 15: return {"Q8_K", 256, 292};
    case 16: return {"IQ2_XXS", 256, 66};
    case 17: return {"IQ2_XS", 256, 74};
    case 18: return {"IQ3_XXS", 256, 98};
    case 19: return {"IQ1_S", 256, 50};
    case 20: return {"IQ4_NL", 32, 18};
    case 21: return {"IQ3_S", 256, 110};
    case 22: return {"IQ2_S", 256, 82};
    case 23: return {"IQ4_XS", 256, 136};
    case 24: return {"I8", 1, 1};
    case 25: return {"I16", 1, 2};
    case 26: return {"I32", 1, 4};
    case 27: return {"I64", 1, 8};
    case 28: return {"F64", 1, 8};
    case 29: return {"IQ1_M", 256, 56};
    case 30: return {"BF16", 1, 2};
    case 34: return {"TQ1_0", 256, 54};
    case 35: return {"TQ2_0", 256, 66};
    case 39: return {"MXFP4", 32, 17};
    default: return {nullptr, 0, 0};
  }
}

bool is_supported(tensor_type t) {
  switch (t) {
    case tensor_type::f32: case tensor_type::f16: case tensor_type::bf16:
    case tensor_type::q8_0: case tensor_type::q4_k: case tensor_type::q6_k:
    case tensor_type::q4_0: case tensor_type::q4_1: case tensor_type::q5_0: case tensor_type::q5_1:
    case tensor_type::q2_k: case tensor_type::q3_k: case tensor_type::q5_k: case tensor_type::iq4_nl:
    case tensor_type::iq4_xs: case tensor_type::mxfp4:
      return true;
    default:
      return false;
  }
}

}  // namespace agentq::gguf
