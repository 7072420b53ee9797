// RoPE frequency scaling from GGUF metadata (rope.scaling.*): none, linear and YaRN, computed
// as llama.cpp does (per-pair angle per position and the cos/sin magnitude scale).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace agentq {

namespace gguf { class file; }

struct rope_scaling {
  enum class kind { none, linear, yarn };
  kind type = kind::none;
  float factor = 1.0f;        // rope.scaling.factor: context extension (freq_scale = 1 / factor)
  int64_t orig_ctx = 0;       // yarn: rope.scaling.original_context_length (default: context_length)
  float attn_factor = 1.0f;   // rope.scaling.attn_factor (llama.cpp's rope_attn_factor)
  float beta_fast = 32.0f;    // rope.scaling.yarn_beta_fast
  float beta_slow = 1.0f;     // rope.scaling.yarn_beta_slow
  float ext_factor = 1.0f;    // rope.scaling.yarn_ext_factor (llama.cpp: 1 for yarn)
  float log_mul = 0.0f;       // rope.scaling.yarn_log_multiplier (DeepSeek-style mscale_all_dims)
};

// Reads <arch>.rope.scaling.*; false with *error on an unknown type or a bad value.
bool parse_rope_scaling(const gguf::file& f, const std::string& arch, int64_t n_ctx_train, rope_scaling* out,
                        std::string* error);

// inv_freq[i] (i < n_rot/2): the angle per position of pair i, so theta = pos * inv_freq[i];
// *mscale: the factor on cos and sin (1 unless YaRN or attn_factor). freq_factors (may be
// empty): rope_freqs.weight, dividing each pair's base angle as llama.cpp's freq_factors.
void rope_angles(const rope_scaling& s, int32_t n_rot, float base, const std::vector<float>& freq_factors,
                 std::vector<float>* inv_freq, float* mscale);

}  // namespace agentq
