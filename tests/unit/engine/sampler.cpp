// The sampler: greedy picks the lowest-id maximum, a fixed seed reproduces a sample,
// top-k/top-p/min-p and the allowed-token mask never yield an excluded token, and the
// penalties act on recently accepted tokens only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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

TEST_CASE("greedy without a mask (the vectorised scan) equals the scalar rule: ties, NaN, -inf, every length") {
  std::mt19937 rng(3);
  auto scalar = [](const std::vector<float>& v) {  // the masked path's rule
    token_id best = -1;
    for (token_id id = 0; id < token_id(v.size()); ++id)
      if (best < 0 || v[size_t(id)] > v[size_t(best)]) best = id;
    return best;
  };
  for (int32_t n : {1, 2, 7, 8, 9, 31, 32, 33, 63, 100, 1000, 32000, 32003}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = float(int(rng() % 50)) - 25.0f;  // small integers: many ties
      if (trial == 1) v[rng() % v.size()] = 1e9f;              // one clear winner
      if (trial == 2) v[rng() % v.size()] = NAN;               // a NaN somewhere never wins
      if (trial == 3) std::fill(v.begin(), v.end(), -INFINITY);
      if (trial == 4) v[0] = NAN;                              // a NaN first stays (the scalar rule)
      if (trial == 5) v.back() = INFINITY;
      sampler s(sampling_params{});
      auto copy = v;
      CHECK_MESSAGE(s.sample(copy.data(), n) == scalar(v), "n ", n, " trial ", trial);
    }
  }
}

TEST_CASE("greedy under a mask (word-at-a-time, then the vectorised scan) equals the scalar rule") {
  std::mt19937 rng(5);
  auto scalar = [](std::vector<float>& v, const std::vector<uint32_t>& bits) {  // the old path, in full
    token_id best = -1;
    for (token_id id = 0; id < token_id(v.size()); ++id) {
      const bool ok = size_t(id) / 32 < bits.size() && ((bits[size_t(id) / 32] >> (id % 32)) & 1u);
      if (!ok) {
        v[size_t(id)] = -INFINITY;
        continue;
      }
      if (best < 0 || v[size_t(id)] > v[size_t(best)]) best = id;
    }
    return best;
  };
  for (int32_t n : {1, 31, 32, 33, 100, 1000, 32003}) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = float(int(rng() % 50)) - 25.0f;
      std::vector<uint32_t> bits(size_t(n + 31) / 32);
      for (auto& w : bits) w = trial == 1 ? ~0u : trial == 2 ? 0u : uint32_t(rng()) & uint32_t(rng());
      if (trial == 3) std::fill(v.begin(), v.end(), -INFINITY);                  // every allowed logit -inf
      if (trial == 4) std::fill(v.begin(), v.end(), NAN);                        // first allowed is NaN
      if (trial == 5) v[rng() % v.size()] = NAN;
      if (trial == 6 && bits.size() > 1) bits.pop_back();  // a short mask (an empty one means no mask)
      if (trial == 7) for (size_t i = 0; i < bits.size(); i += 2) bits[i] = ~0u;  // whole words mixed in
      auto a = v, b = v;
      sampler s(sampling_params{});
      const token_id got = s.sample(a.data(), n, bits);
      CHECK_MESSAGE(got == scalar(b, bits), "n ", n, " trial ", trial);
      CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0, "masked logits, n ", n, " trial ", trial);
    }
  }
}

TEST_CASE("temperature sampling past the sorted prefix: flat logits, ties by id, top-p cut at 1000 of 2000") {
  // 2000 equal logits: the draw must reach the lazily sorted tail (only 256 are sorted up
  // front); top-p 0.5 keeps exactly the 1000 lowest ids (ties go to the lower id).
  for (float top_p : {1.0f, 0.5f}) {
    sampling_params p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.seed = 11;
    sampler s(p);
    const int32_t n = 2000;
    std::vector<int> hits(static_cast<size_t>(n));
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> l(static_cast<size_t>(n), 0.5f);
      const token_id t = s.sample(l.data(), n);
      REQUIRE(t >= 0);
      REQUIRE(t < n);
      ++hits[size_t(t)];
    }
    const int kept = top_p < 1.0f ? 1000 : n;
    for (int32_t id = kept; id < n; ++id) CHECK_MESSAGE(hits[size_t(id)] == 0, "id ", id, " top_p ", top_p);
    const double mean = double(draws) / kept;
    int lo = draws, hi = 0, beyond_prefix = 0;
    for (int32_t id = 0; id < kept; ++id) {
      lo = std::min(lo, hits[size_t(id)]);
      hi = std::max(hi, hits[size_t(id)]);
      if (id >= 256) beyond_prefix += hits[size_t(id)];
    }
    CHECK(lo > 0);
    CHECK(hi < 3 * mean);
    CHECK(beyond_prefix > draws / 2);  // most of the mass lies past the first 256
  }
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
