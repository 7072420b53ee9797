// RoPE scaling: rope.scaling.* keys parse (none, linear, yarn; anything else is refused by
// name), and the angles and cos/sin scale equal a transcription of llama.cpp's computation
// (ggml's rope_yarn, ggml_rope_yarn_corr_dims and llama_context's yarn_attn_factor).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/rope_scaling.h"
#include "temp_dir.h"

using namespace agentq;

namespace {

// llama.cpp's cos/sin for one position and pair, as its CPU rope computes them.
void ggml_cs(float pos, int i, int n_dims, float base, float freq_scale, int n_ctx_orig, float beta_fast,
             float beta_slow, float ext_factor, float rope_attn_factor, float* c, float* s) {
  // llama_context
  float attn_factor = 1.0f;
  if (ext_factor != 0) {
    auto get_mscale = [](float scale, float mscale) { return scale <= 1.0f ? 1.0f : (0.1f * mscale * logf(scale) + 1.0f); };
    const float factor = 1.0f / freq_scale;
    attn_factor = get_mscale(factor, 1.0f);
    attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
  }
  attn_factor *= rope_attn_factor;
  // ggml_rope_yarn_corr_dims
  auto corr_dim = [&](float n_rot) { return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base)); };
  float dims[2] = {std::max(0.0f, floorf(corr_dim(beta_fast))), std::min(float(n_dims - 1), ceilf(corr_dim(beta_slow)))};
  // ggml_rope_cache_init + rope_yarn
  const float theta_scale = powf(base, -2.0f / n_dims);
  float theta_extrap = pos;
  for (int k = 0; k < i; ++k) theta_extrap *= theta_scale;
  const float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp, mscale = attn_factor;
  if (ext_factor != 0.0f) {
    const int i0 = 2 * i;
    const float y = (i0 / 2 - dims[0]) / std::max(0.001f, dims[1] - dims[0]);
    const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
    theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
    mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
  }
  *c = cosf(theta) * mscale;
  *s = sinf(theta) * mscale;
}

std::unique_ptr<gguf::file> write_and_open(test::temp_dir& dir, const std::function<void(gguf::writer&)>& keys) {
  gguf::writer w;
  w.set_string("general.architecture", "qwen2");
  keys(w);
  std::string err;
  const std::string path = dir.file("m.gguf");
  REQUIRE(w.open(path, &err));
  REQUIRE(w.close(&err));
  auto f = gguf::file::open(path, &err);
  REQUIRE_MESSAGE(f, err);
  return f;
}

}  // namespace

TEST_CASE("YaRN angles and magnitude match llama.cpp's") {
  test::temp_dir dir;
  auto f = write_and_open(dir, [](gguf::writer& w) {
    w.set_string("qwen2.rope.scaling.type", "yarn");
    w.set_f32("qwen2.rope.scaling.factor", 4.0f);
    w.set_u32("qwen2.rope.scaling.original_context_length", 32768);
  });
  rope_scaling s;
  std::string err;
  REQUIRE_MESSAGE(parse_rope_scaling(*f, "qwen2", 131072, &s, &err), err);
  CHECK(s.type == rope_scaling::kind::yarn);
  CHECK(s.factor == 4.0f);
  CHECK(s.orig_ctx == 32768);
  CHECK(s.beta_fast == 32.0f);
  CHECK(s.beta_slow == 1.0f);
  for (int n_rot : {64, 128}) {
    for (float base : {10000.0f, 1000000.0f}) {
      std::vector<float> inv;
      float mscale = 0;
      rope_angles(s, n_rot, base, {}, &inv, &mscale);
      CHECK(mscale == doctest::Approx(1.0f + 0.1f * std::log(4.0f)).epsilon(1e-6));
      for (float pos : {0.0f, 1.0f, 17.0f, 1000.0f, 40000.0f}) {
        for (int i = 0; i < n_rot / 2; ++i) {
          CAPTURE(n_rot);
          CAPTURE(pos);
          CAPTURE(i);
          float c, sn;
          ggml_cs(pos, i, n_rot, base, 0.25f, 32768, 32, 1, 1, 1, &c, &sn);
          const float theta = pos * inv[size_t(i)];
          // NOTE: the same math in a different float order (llama.cpp multiplies the position
          // by theta_scale i times; we take pos * a per-pair factor): the angles agree within a
          // few ulps of theta (ulp ~ 1.2e-7 |theta|), so cos/sin within 4 such ulps.
          const float tol = 1e-5f + 5e-7f * std::fabs(theta) * mscale;
          CHECK(std::fabs(std::cos(theta) * mscale - c) <= tol);
          CHECK(std::fabs(std::sin(theta) * mscale - sn) <= tol);
        }
      }
    }
  }
}

TEST_CASE("linear and none scaling; unknown types and bad values are refused") {
  test::temp_dir dir;
  std::string err;
  rope_scaling s;
  {
    auto f = write_and_open(dir, [](gguf::writer& w) {
      w.set_string("qwen2.rope.scaling.type", "linear");
      w.set_f32("qwen2.rope.scaling.factor", 2.0f);
    });
    REQUIRE(parse_rope_scaling(*f, "qwen2", 4096, &s, &err));
    std::vector<float> inv;
    float mscale = 0;
    rope_angles(s, 64, 10000.0f, {}, &inv, &mscale);
    CHECK(mscale == 1.0f);
    for (int i = 0; i < 32; ++i) CHECK(inv[size_t(i)] == doctest::Approx(0.5 * std::pow(10000.0, -2.0 * i / 64)).epsilon(1e-5));
  }
  {
    auto f = write_and_open(dir, [](gguf::writer&) {});
    REQUIRE(parse_rope_scaling(*f, "qwen2", 4096, &s, &err));
    CHECK(s.type == rope_scaling::kind::none);
    std::vector<float> inv;
    float mscale = 0;
    const std::vector<float> ff(32, 2.0f);  // rope_freqs.weight divides each pair's angle
    rope_angles(s, 64, 10000.0f, ff, &inv, &mscale);
    CHECK(mscale == 1.0f);
    CHECK(inv[0] == 0.5f);
  }
  {
    auto f = write_and_open(dir, [](gguf::writer& w) { w.set_string("qwen2.rope.scaling.type", "longrope-ish"); });
    CHECK_FALSE(parse_rope_scaling(*f, "qwen2", 4096, &s, &err));
    CHECK(err.find("longrope-ish") != std::string::npos);
  }
  {
    auto f = write_and_open(dir, [](gguf::writer& w) {
      w.set_string("qwen2.rope.scaling.type", "yarn");
      w.set_f32("qwen2.rope.scaling.factor", -1.0f);
    });
    CHECK_FALSE(parse_rope_scaling(*f, "qwen2", 4096, &s, &err));
    CHECK(err.find("factor") != std::string::npos);
  }
}
