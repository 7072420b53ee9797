// Sampling chain and PRNG (see sampler.h for the order of operations).
#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace agentq {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// The largest logit's id, lowest id on ties; NaNs never win unless logits[0] is NaN, which
// then stays (the scalar scan's rule). Two vectorised passes: the max, then its first index.
// NOTE: the hot path of greedy decoding on the host: one call per sequence per step over the
// whole vocabulary (the branchy scalar scan cost ~150 us at a 32k vocab: a 128-sequence GPU
// step spent most of its time here).
token_id argmax_unmasked(const float* v, int32_t n) {
  if (n <= 0) return -1;
  if (std::isnan(v[0])) return 0;
  float m = v[0];
  int32_t i = 1;
#if defined(__AVX2__)
  if (n >= 32) {
    __m256 a0 = _mm256_set1_ps(v[0]), a1 = a0, a2 = a0, a3 = a0;
    // NOTE: _mm256_max_ps(x, acc) returns acc when x is NaN, so NaNs are skipped.
    for (i = 0; i + 32 <= n; i += 32) {
      a0 = _mm256_max_ps(_mm256_loadu_ps(v + i), a0);
      a1 = _mm256_max_ps(_mm256_loadu_ps(v + i + 8), a1);
      a2 = _mm256_max_ps(_mm256_loadu_ps(v + i + 16), a2);
      a3 = _mm256_max_ps(_mm256_loadu_ps(v + i + 24), a3);
    }
    const __m256 a = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, a);
    for (float x : lanes) m = x > m ? x : m;
  }
#endif
  for (; i < n; ++i) m = v[i] > m ? v[i] : m;
  int32_t j = 0;
#if defined(__AVX2__)
  const __m256 mm = _mm256_set1_ps(m);
  for (; j + 8 <= n; j += 8) {
    const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + j), mm, _CMP_EQ_OQ));
    if (bits) return j + __builtin_ctz(unsigned(bits));
  }
#endif
  for (; j < n; ++j)
    if (v[j] == m) return j;
  return 0;  // not reached: m is one of the values
}

// Greedy under a grammar mask, the scalar rule's answer: disallowed ids get -inf (as that
// path leaves them), whole words at a time; the argmax is then the vectorised scan's, except
// in the cases where the rule keeps the first allowed id (it is NaN, or every allowed logit
// is -inf), answered directly. -1 when nothing is allowed.
token_id argmax_masked(float* v, int32_t n, std::span<const uint32_t> bits) {
  token_id first_allowed = -1;
  for (int32_t lo = 0; lo < n; lo += 32) {
    const size_t w = size_t(lo) / 32;
    const uint32_t m = w < bits.size() ? bits[w] : 0u;
    const int32_t hi = std::min(n, lo + 32);
    if (m == ~0u && hi - lo == 32) {
      if (first_allowed < 0) first_allowed = lo;
      continue;
    }
    for (int32_t id = lo; id < hi; ++id) {
      if ((m >> (id - lo)) & 1u) {
        if (first_allowed < 0) first_allowed = id;
      } else {
        v[id] = -INFINITY;
      }
    }
  }
  if (first_allowed < 0) return -1;
  if (std::isnan(v[first_allowed])) return first_allowed;
  const token_id best = argmax_unmasked(v, n);
  return v[best] == -INFINITY ? first_allowed : best;
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

  // Mask, greedy (the answer too when no allowed logit is finite).
  const token_id best =
      allow_bits.empty() ? argmax_unmasked(logits, n_vocab) : argmax_masked(logits, n_vocab, allow_bits);
  if (best < 0 || p.temperature <= 0.0f) return best;

  // Candidates, tempered, in the order the chain walks them: descending logit, ties by id.
  cand_.clear();
  for (token_id id = 0; id < n_vocab; ++id)
    if (std::isfinite(logits[id])) cand_.push_back({logits[id] / p.temperature, 0.0f, id});
  if (cand_.empty()) return best;
  auto by_logit = [](const candidate& a, const candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t n = cand_.size();
  // cand_[0, sorted) is in final order. NOTE: without top-k only a prefix of the order is
  // ever walked (top-p and min-p cut it; the draw stops early with high probability), so
  // only the best kSortedPrefix are sorted up front, and the prefix doubles (nth_element,
  // then a sort of the new part) when a walk reaches its end: a full sort of a 32k
  // vocabulary cost ~2 ms per token, per sequence (scripts/bench/sampler.sh).
  constexpr size_t kSortedPrefix = 256;
  size_t sorted = n;
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), by_logit);
    n = size_t(p.top_k);
  } else if (n > kSortedPrefix) {
    std::nth_element(cand_.begin(), cand_.begin() + kSortedPrefix, cand_.end(), by_logit);
    std::sort(cand_.begin(), cand_.begin() + kSortedPrefix, by_logit);
    sorted = kSortedPrefix;
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  auto at = [&](size_t i) -> const candidate& {  // cand_[i] in its final place
    while (i >= sorted) {
      const size_t next = std::min(n, std::max(2 * sorted, sorted + kSortedPrefix));
      const auto first = cand_.begin() + ptrdiff_t(sorted), mid = cand_.begin() + ptrdiff_t(next);
      if (next < n) std::nth_element(first, mid, cand_.begin() + ptrdiff_t(n), by_logit);
      std::sort(first, mid, by_logit);
      sorted = next;
    }
    return cand_[i];
  };

  // Softmax over the kept candidates: e = exp(logit - max), p = e / sum. NOTE: the sum runs
  // in array order (the sorted prefix, then the rest as nth_element left it).
  const float mx = cand_[0].logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].e = std::exp(cand_[i].logit - mx);
    sum += cand_[i].e;
  }
  auto prob = [&](size_t i) { return float(at(i).e / sum); };

  // top-p: the smallest prefix with mass >= top_p (at least one token).
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob(i);
      if (cum >= p.top_p) { keep = i + 1; break; }
    }
    n = std::max<size_t>(1, keep);
  }
  // min-p: drop tokens below min_p * p(top).
  if (p.min_p > 0.0f) {
    const float floor_p = p.min_p * prob(0);
    size_t keep = 1;
    while (keep < n && prob(keep) >= floor_p) ++keep;
    n = keep;
  }

  // Draw from the renormalised remainder. cand_[0, n) holds the kept set (the sorted prefix,
  // or every candidate), so its total needs no order.
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += float(cand_[i].e / sum);
  const double r = double(rng_.uniform()) * total;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += prob(i);
    if (r < cum) return cand_[i].id;
  }
  return at(n - 1).id;
}

}  // namespace agentq
