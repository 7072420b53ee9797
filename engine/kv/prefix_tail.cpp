// Prefix cache below block granularity: the partly filled last blocks ("tails") that
// sequences leave when they end, and the partial match of a new prompt against any cached
// child of its cached chain (prefix_cache.h). A system prompt shorter than a block, or one
// that ends mid-block, is then computed once per worker: the next prompt copies its rows.
#include <algorithm>
#include <cstdint>

#include "kv/prefix_cache.h"

namespace agentq {

namespace {

// NOTE: a bound on the children compared per lookup: a parent with thousands of distinct
// next blocks (root, under many different prompts) must not make every admission O(cache).
// Each comparison stops at the first differing token, so this is ~µs even when reached. The
// parent's tails (at most k_max_tails) are compared whatever their age.
constexpr size_t k_max_children_scanned = 256;

int32_t common_run(std::span<const token_id> a, std::span<const token_id> b, int32_t max_n) {
  const int32_t n = std::min<int32_t>({int32_t(a.size()), int32_t(b.size()), max_n});
  int32_t i = 0;
  while (i < n && a[size_t(i)] == b[size_t(i)]) ++i;
  return i;
}

}  // namespace

std::pair<uint64_t, int32_t> prefix_cache::best_child(uint64_t parent, std::span<const token_id> tokens,
                                                      int32_t max_tokens) const {
  uint64_t best = 0;
  int32_t best_n = 0;
  auto consider = [&](uint64_t h) {
    const int32_t n = common_run(entries_.at(h).tokens, tokens, max_tokens);
    if (n > best_n) {
      best = h;
      best_n = n;
    }
  };
  // the parent's tails always (a few), then its newest children (full blocks and tails)
  if (auto t = tails_.find(parent); t != tails_.end())
    for (uint64_t h : t->second) consider(h);
  if (auto c = children_.find(parent); c != children_.end()) {
    const auto& kids = c->second;
    const size_t n_scan = std::min(kids.size(), k_max_children_scanned);
    for (size_t k = 0; k < n_scan; ++k) consider(kids[kids.size() - 1 - k]);
  }
  return {best, best_n};
}

bool prefix_cache::insert_tail(uint64_t parent, std::span<const token_id> tokens, int32_t block_idx) {
  const int32_t n = int32_t(tokens.size());
  AGENTQ_KV_ASSERT(n > 0 && n < pool_.block_size());
  if (pool_.windowed() || by_block_.count(block_idx)) return false;
  const uint64_t h = hash_block(parent, tokens);
  if (entries_.count(h)) {  // the same tail (or a hash collision with other tokens: keep that one)
    touch(entries_.at(h), h);
    return false;
  }
  // Nothing new when a child already holds these tokens (or more of them): mark it used.
  const auto [h_best, n_best] = best_child(parent, tokens, n);
  if (n_best == n) {
    touch(entries_.at(h_best), h_best);
    return false;
  }
  // Tails this one extends are dropped (it serves every prompt they serve), then the least
  // recently used of the parent's tails while the parent has k_max_tails.
  // NOTE: the cache's hold is all that is dropped: a block another sequence still uses stays
  // with it; one nobody uses goes back to the free list.
  std::vector<uint64_t> drop;
  int32_t n_kept = 0;
  uint64_t lru_hash = 0, lru_use = UINT64_MAX;
  if (auto t = tails_.find(parent); t != tails_.end()) {
    for (uint64_t h : t->second) {
      const entry& e = entries_.at(h);
      if (int32_t(e.tokens.size()) < n && common_run(e.tokens, tokens, n) == int32_t(e.tokens.size())) {
        drop.push_back(h);
        continue;
      }
      ++n_kept;
      if (e.last_use < lru_use) {
        lru_use = e.last_use;
        lru_hash = h;
      }
    }
  }
  if (n_kept >= k_max_tails) drop.push_back(lru_hash);
  for (uint64_t h : drop) erase(h);
  entry e;
  e.block_idx = block_idx;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.tail = true;
  add_entry(h, std::move(e));
  return true;
}

bool prefix_cache::take_tail(int32_t block_idx) {
  auto b = by_block_.find(block_idx);
  if (b == by_block_.end() || !entries_.at(b->second).tail) return false;
  erase(b->second);
  return true;
}

}  // namespace agentq
