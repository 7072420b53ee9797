// RoPE scaling: GGUF keys to parameters, and the per-pair angles of linear and YaRN
// scaling (ggml's rope_yarn / ggml_rope_yarn_corr_dims, llama_context's attn_factor).
#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>

#include "gguf/reader.h"

namespace agentq {

bool parse_rope_scaling(const gguf::file& f, const std::string& arch, int64_t n_ctx_train, rope_scaling* out,
                        std::string* error) {
  const std::string p = arch + ".rope.scaling.";
  rope_scaling s;
  const auto type = f.get_string(p + "type");
  // llama.cpp: rope.scaling.factor, else the older rope.scale_linear; 0 means none.
  double factor = f.get_float(p + "factor").value_or(f.get_float(arch + ".rope.scale_linear").value_or(0.0));
  if (!std::isfinite(factor) || factor < 0) {
    *error = "invalid " + p + "factor";
    return false;
  }
  if (!type || *type == "none") {
    s.type = rope_scaling::kind::none;
  } else if (*type == "linear") {
    s.type = rope_scaling::kind::linear;
  } else if (*type == "yarn") {
    s.type = rope_scaling::kind::yarn;
  } else {
    *error = "unsupported rope.scaling.type '" + std::string(*type) + "' (supported: none, linear, yarn)";
    return false;
  }
  s.factor = factor == 0 ? 1.0f : float(factor);
  s.orig_ctx = f.get_int(p + "original_context_length").value_or(n_ctx_train);
  s.attn_factor = float(f.get_float(p + "attn_factor").value_or(1.0));
  s.beta_fast = float(f.get_float(p + "yarn_beta_fast").value_or(32.0));
  s.beta_slow = float(f.get_float(p + "yarn_beta_slow").value_or(1.0));
  s.ext_factor = float(f.get_float(p + "yarn_ext_factor").value_or(1.0));
  s.log_mul = float(f.get_float(p + "yarn_log_multiplier").value_or(0.0));
  if (s.orig_ctx <= 0 || !std::isfinite(s.attn_factor) || !std::isfinite(s.beta_fast) || !std::isfinite(s.beta_slow) ||
      !std::isfinite(s.ext_factor) || !std::isfinite(s.log_mul)) {
    *error = "invalid " + p + "* values";
    return false;
  }
  *out = s;
  return true;
}

namespace {

// ggml_rope_yarn_corr_dim: the dimension whose wavelength spans n_ctx_orig / n_rot turns.
float corr_dim(int n_dims, int64_t n_ctx_orig, float n_rot, float base) {
  return float(n_dims) * std::log(float(n_ctx_orig) / (n_rot * 2 * float(M_PI))) / (2 * std::log(base));
}

}  // namespace

void rope_angles(const rope_scaling& s, int32_t n_rot, float base, const std::vector<float>& freq_factors,
                 std::vector<float>* inv_freq, float* mscale) {
  // llama.cpp: freq_scale = 1 / factor for linear and yarn, 1 for none.
  const float freq_scale = s.type == rope_scaling::kind::none ? 1.0f : 1.0f / s.factor;
  const bool yarn = s.type == rope_scaling::kind::yarn && s.ext_factor != 0.0f;
  const float ext_factor = yarn ? s.ext_factor : 0.0f;
  // llama_context: attn_factor for YaRN is get_mscale(factor) (or its DeepSeek ratio), divided by
  // the 1 + 0.1 ln(factor) that ggml's rope_yarn multiplies back in; then times rope_attn_factor.
  float attn = 1.0f;
  if (yarn) {
    auto get_mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : (0.1f * m * std::log(scale) + 1.0f); };
    const float factor = 1.0f / freq_scale;
    attn = s.log_mul != 0.0f ? get_mscale(factor, 1.0f) / get_mscale(factor, s.log_mul) : get_mscale(factor, 1.0f);
    attn *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  attn *= s.attn_factor;
  float ms = attn;
  if (yarn) ms *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  *mscale = ms;

  float low = 0, high = 0;  // ggml_rope_yarn_corr_dims
  if (yarn) {
    low = std::max(0.0f, std::floor(corr_dim(n_rot, s.orig_ctx, s.beta_fast, base)));
    high = std::min(float(n_rot - 1), std::ceil(corr_dim(n_rot, s.orig_ctx, s.beta_slow, base)));
  }
  const int32_t half = n_rot / 2;
  inv_freq->resize(size_t(half));
  const float theta_scale = std::pow(base, -2.0f / float(n_rot));
  float theta = 1.0f;
  for (int32_t i = 0; i < half; ++i) {
    const float extrap = freq_factors.empty() ? theta : theta / freq_factors[size_t(i)];
    float f = freq_scale * extrap;
    if (yarn) {
      // rope_yarn_ramp at i0 = 2i: 1 below `low` (extrapolate), 0 above `high` (interpolate).
      const float y = (float(i) - low) / std::max(0.001f, high - low);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
      f = f * (1 - ramp_mix) + extrap * ramp_mix;
    }
    (*inv_freq)[size_t(i)] = f;
    theta *= theta_scale;
  }
}

}  // namespace agentq
