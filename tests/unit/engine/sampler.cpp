// The sampler: greedy picks the lowest-id maximum, a fixed seed reproduces a sample,
// top-k/top-p/min-p and the allowed-token mask never yield an excluded token, and the
// penalties act on recently accepted tokens only.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include "sample/sampler.h"

using namespace agentq;

namespace {
std::vector<float> ramp(int32_t n) {  // logit of id i = i / 10 (highest id most likely)
  std::vector<float> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[size_t(i)] = float(i) / 10.0f;
  return v;
}
}  // namespace

TEST_CASE("greedy: argmax, ties to the lowest id") {
  sampler s(sampling_params{});
  std::vector<float> l = {1.0f, 3.0f, 3.0f, 2.0f};
  CHECK(s.sample(l.data(), 4) == 1);
}

TEST_CASE("a fixed seed reproduces the same draws; another seed differs") {
  sampling_params p;
  p.temperature = 1.5f;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    sampler s(p);
    std::vector<token_id> out;
    for (int i = 0; i < 64; ++i) {
      auto l = ramp(100);
      out.push_back(s.sample(l.data(), 100));
    }
    return out;
  };
  CHECK(draw(7) == draw(7));
  CHECK(draw(7) != draw(8));
}

TEST_CASE("top-k, top-p and min-p keep only the head of the distribution") {
  sampling_params p;
  p.temperature = 1.0f;
  p.top_k = 3;
  sampler s(p);
  for (int i = 0; i < 200; ++i) {
    auto l = ramp(50);
    CHECK(s.sample(l.data(), 50) >= 47);
  }
  sampling_params q;
  q.temperature = 1.0f;
  q.top_p = 0.5f;
  sampler s2(q);
  std::vector<float> l2 = {5.0f, 4.9f, 0.0f, 0.0f, 0.0f};  // the top two hold > 0.5 together
  for (int i = 0; i < 200; ++i) {
    auto l = l2;
    token_id t = s2.sample(l.data(), 5);
    CHECK((t == 0 || t == 1));
  }
  sampling_params m;
  m.temperature = 1.0f;
  m.min_p = 0.5f;
  sampler s3(m);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = {0.0f, std::log(0.6f), 0.0f, std::log(0.1f)};  // p relative to top: 1, .6, 1, .1
    token_id t = s3.sample(l.data(), 4);
    CHECK(t != 3);
  }
}

TEST_CASE("the allowed-token mask bans everything else") {
  std::vector<uint32_t> bits(2, 0);
  bits[0] |= 1u << 5;
  bits[1] |= 1u << 1;  // id 33
  sampler g(sampling_params{});
  auto l = ramp(64);
  CHECK(g.sample(l.data(), 64, bits) == 33);
  sampling_params p;
  p.temperature = 2.0f;
  sampler s(p);
  std::set<token_id> seen;
  for (int i = 0; i < 300; ++i) {
    auto l2 = ramp(64);
    seen.insert(s.sample(l2.data(), 64, bits));
  }
  CHECK(seen == std::set<token_id>{5, 33});
  std::vector<uint32_t> none(2, 0);
  auto l3 = ramp(64);
  CHECK(g.sample(l3.data(), 64, none) == -1);
}

TEST_CASE("penalties apply to the recent window only") {
  sampling_params p;
  p.repeat_penalty = 100.0f;
  p.penalty_last_n = 2;
  sampler s(p);
  std::vector<float> base = {1.0f, 2.0f, 3.0f, 0.5f};
  s.accept(2);
  auto l = base;
  CHECK(s.sample(l.data(), 4) == 1);  // 3.0 / 100 < 2.0
  s.accept(1);
  l = base;
  CHECK(s.sample(l.data(), 4) == 0);  // both 2 and 1 penalised
  s.accept(3);                        // window of 2: {1, 3}; 2 is free again
  l = base;
  CHECK(s.sample(l.data(), 4) == 2);
  sampling_params f;
  f.frequency_penalty = 1.0f;
  f.presence_penalty = 0.5f;
  sampler s2(f);
  s2.accept(2);
  s2.accept(2);
  l = base;
  s2.sample(l.data(), 4);
  CHECK(l[2] == doctest::Approx(3.0f - 2.0f - 0.5f));
}
