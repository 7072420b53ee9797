// Reference grammar mask for token_mask.cu: disallowed tokens' logits -> -inf.
#include <limits>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void apply_token_mask(float* logits, const uint32_t* mask, int32_t n_rows, int32_t n_vocab) {
  const int32_t n_words = (n_vocab + 31) / 32;
  for (int32_t r = 0; r < n_rows; ++r)
    for (int32_t t = 0; t < n_vocab; ++t)
      if (!((mask[int64_t(r) * n_words + t / 32] >> (t % 32)) & 1u))
        logits[int64_t(r) * n_vocab + t] = -std::numeric_limits<float>::infinity();
}

}  // namespace agentq::kernels::ref
