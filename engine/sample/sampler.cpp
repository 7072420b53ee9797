// Sampling chain and PRNG (see sampler.h for the order of operations).
#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

namespace agentq {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
inline bool allowed(std::span<const uint32_t> bits, token_id id) {
  return bits.empty() || (size_t(id) / 32 < bits.size() && ((bits[size_t(id) / 32] >> (id % 32)) & 1u));
}
}  // namespace

rng::rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float rng::uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }

sampler::sampler(const sampling_params& params) : params_(params), rng_(params.seed) {}

void sampler::accept(token_id id) {
  if (params_.penalty_last_n <= 0) return;
  recent_.push_back(id);
  while (int32_t(recent_.size()) > params_.penalty_last_n) recent_.pop_front();
}

token_id sampler::sample(float* logits, int32_t n_vocab, std::span<const uint32_t> allow_bits) {
  const sampling_params& p = params_;

  // Penalties over the recent window (llama.cpp semantics: repeat divides positive
  // logits and multiplies negative ones; frequency and presence subtract).
  if (!recent_.empty() && (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)) {
    counts_.assign(size_t(n_vocab), 0);
    for (token_id id : recent_)
      if (id >= 0 && id < n_vocab) ++counts_[size_t(id)];
    for (token_id id = 0; id < n_vocab; ++id) {
      const int32_t c = counts_[size_t(id)];
      if (c == 0) continue;
      float& l = logits[id];
      if (p.repeat_penalty != 1.0f && p.repeat_penalty > 0.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
      l -= float(c) * p.frequency_penalty + p.presence_penalty;
    }
  }

  // Mask, greedy.
  token_id best = -1;
  for (token_id id = 0; id < n_vocab; ++id) {
    if (!allowed(allow_bits, id)) {
      logits[id] = -INFINITY;
      continue;
    }
    if (best < 0 || logits[id] > logits[best]) best = id;  // ties: lowest id
  }
  if (best < 0 || p.temperature <= 0.0f) return best;

  // Candidates sorted by logit (descending, ties by id), tempered.
  cand_.clear();
  for (token_id id = 0; id < n_vocab; ++id)
    if (std::isfinite(logits[id])) cand_.emplace_back(logits[id] / p.temperature, id);
  if (cand_.empty()) return best;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), by_logit);
    n = size_t(p.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }

  // Softmax over the kept candidates (in place: first becomes the probability).
  const float mx = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first - mx);
    sum += cand_[i].first;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].first = float(cand_[i].first / sum);

  // top-p: the smallest prefix with mass >= top_p (at least one token).
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].first;
      if (cum >= p.top_p) { keep = i + 1; break; }
    }
    n = std::max<size_t>(1, keep);
  }
  // min-p: drop tokens below min_p * p(top).
  if (p.min_p > 0.0f) {
    const float floor_p = p.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= floor_p) ++keep;
    n = keep;
  }

  // Draw from the renormalised remainder.
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  const double r = double(rng_.uniform()) * total;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += cand_[i].first;
    if (r < cum) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace agentq
