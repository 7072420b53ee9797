// Prefix cache: hash-chained full blocks with LRU eviction of unreferenced ones.
#include "kv/prefix_cache.h"

#include <algorithm>

namespace agentq {

uint64_t prefix_cache::hash_block(uint64_t parent, std::span<const token_id> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(parent);
  mix(tokens.size());
  for (token_id t : tokens) mix(uint64_t(uint32_t(t)));
  // final avalanche (splitmix64) so neighbouring chains spread in the table
  h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27; h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

void prefix_cache::touch(entry& e, uint64_t hash) {
  lru_.erase(e.lru_it);
  e.lru_it = lru_.insert(lru_.end(), hash);
  e.last_use = ++use_clock_;
}

void prefix_cache::add_entry(uint64_t hash, entry e) {
  const int32_t b = e.block_idx;
  e.lru_it = lru_.insert(lru_.end(), hash);
  e.last_use = ++use_clock_;
  n_tails_ += e.tail ? 1 : 0;
  children_[e.parent].push_back(hash);
  if (e.tail) tails_[e.parent].push_back(hash);
  entries_.emplace(hash, std::move(e));
  by_block_.emplace(b, hash);
  pool_.cache_hold(b);
}

prefix_match prefix_cache::lookup(std::span<const token_id> tokens, int32_t max_tokens) {
  prefix_match m;
  const int32_t bs = pool_.block_size();
  const int32_t n_full = std::min<int32_t>(int32_t(tokens.size()), max_tokens) / bs;
  uint64_t parent = root_hash;
  std::vector<entry*> hit;
  for (int32_t i = 0; i < n_full; ++i) {
    auto blk = tokens.subspan(size_t(i) * bs, size_t(bs));
    const uint64_t h = hash_block(parent, blk);
    auto it = entries_.find(h);
    if (it == entries_.end()) break;
    entry& e = it->second;
    if (e.parent != parent || !std::equal(blk.begin(), blk.end(), e.tokens.begin(), e.tokens.end())) break;  // collision
    m.blocks.push_back(e.block_idx);
    m.hashes.push_back(h);
    hit.push_back(&e);
    parent = h;
  }
  // Windowed KV: a hit is usable only as far as its window's blocks kept their windowed layers.
  const size_t n_usable = size_t(pool_.usable_prefix(m.blocks, int32_t(m.blocks.size()) * bs) / bs);
  m.blocks.resize(n_usable);
  m.hashes.resize(n_usable);
  hit.resize(n_usable);
  m.n_tokens = int32_t(m.blocks.size()) * bs;
  n_hits_ += int64_t(m.blocks.size());
  // Then the rows of one more cached block: the child of the chain sharing the longest run.
  // NOTE: not on a windowed pool (a partial hit's window would need its own usable_prefix rules).
  const int32_t limit = std::min<int32_t>(int32_t(tokens.size()), max_tokens) - m.n_tokens;
  entry* partial = nullptr;
  uint64_t partial_hash = 0;
  if (limit > 0 && !pool_.windowed()) {
    const uint64_t at = m.hashes.empty() ? root_hash : m.hashes.back();
    const auto [h, n] = best_child(at, tokens.subspan(size_t(m.n_tokens)), std::min(limit, bs));
    if (n > 0) {
      partial = &entries_.at(h);
      partial_hash = h;
      m.blocks.push_back(partial->block_idx);
      m.n_partial = n;
      m.n_tokens += n;
      ++n_partial_hits_;
      n_partial_tokens_ += n;
    }
  }
  // NOTE: touched leaf first (the partial block, then the chain tail-first) so a chain's head is
  // the most recent: eviction takes leaves before the parents that other chains may still share.
  if (partial) touch(*partial, partial_hash);
  for (size_t i = hit.size(); i-- > 0;) touch(*hit[i], m.hashes[i]);
  return m;
}

uint64_t prefix_cache::insert(uint64_t parent, std::span<const token_id> tokens, int32_t block_idx) {
  AGENTQ_KV_ASSERT(int32_t(tokens.size()) == pool_.block_size());
  const uint64_t h = hash_block(parent, tokens);
  auto it = entries_.find(h);
  if (it != entries_.end()) {
    touch(it->second, h);  // already cached (maybe in another block, or a collision: keep it)
    return h;
  }
  if (by_block_.count(block_idx)) return h;  // block cached under another chain: leave it
  entry e;
  e.block_idx = block_idx;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  add_entry(h, std::move(e));
  return h;
}

void prefix_cache::erase(uint64_t hash) {
  auto it = entries_.find(hash);
  AGENTQ_KV_ASSERT(it != entries_.end());
  const int32_t b = it->second.block_idx;
  lru_.erase(it->second.lru_it);
  by_block_.erase(b);
  n_tails_ -= it->second.tail ? 1 : 0;
  auto unlist = [&](std::unordered_map<uint64_t, std::vector<uint64_t>>& index) {
    auto c = index.find(it->second.parent);
    AGENTQ_KV_ASSERT(c != index.end());
    auto& v = c->second;
    v.erase(std::find(v.begin(), v.end(), hash));
    if (v.empty()) index.erase(c);
  };
  unlist(children_);
  if (it->second.tail) unlist(tails_);
  entries_.erase(it);
  pool_.cache_drop(b);
}

bool prefix_cache::evict_one() {
  for (uint64_t h : lru_) {
    const auto& e = entries_.at(h);
    if (pool_.refcount(e.block_idx) == 1) {
      erase(h);
      ++n_evictions_;
      return true;
    }
  }
  return false;
}

void prefix_cache::evict_all_unused() {
  while (evict_one()) {
  }
}

int32_t prefix_cache::n_unreferenced() const {
  return pool_.n_cache_only();  // every cached block is held by the pool's cache hold (sanity())
}

void prefix_cache::sanity() const {
  AGENTQ_KV_ASSERT(entries_.size() == by_block_.size());
  AGENTQ_KV_ASSERT(entries_.size() == lru_.size());
  for (uint64_t h : lru_) AGENTQ_KV_ASSERT(entries_.count(h) == 1);
  int32_t n_held = 0;
  for (int32_t b = 0; b < pool_.n_block_ids(); ++b) n_held += pool_.cache_held(b) ? 1 : 0;
  AGENTQ_KV_ASSERT(n_held == int32_t(entries_.size()));
  int32_t n_tails = 0;
  for (const auto& [h, e] : entries_) {
    AGENTQ_KV_ASSERT(*e.lru_it == h);
    AGENTQ_KV_ASSERT(pool_.cache_held(e.block_idx) && pool_.refcount(e.block_idx) >= 1);
    AGENTQ_KV_ASSERT(by_block_.at(e.block_idx) == h);
    AGENTQ_KV_ASSERT(hash_block(e.parent, e.tokens) == h);
    const auto& kids = children_.at(e.parent);
    AGENTQ_KV_ASSERT(std::count(kids.begin(), kids.end(), h) == 1);
    if (e.tail) {
      AGENTQ_KV_ASSERT(!e.tokens.empty() && int32_t(e.tokens.size()) < pool_.block_size() && !pool_.windowed());
      const auto& tails = tails_.at(e.parent);
      AGENTQ_KV_ASSERT(std::count(tails.begin(), tails.end(), h) == 1 && int32_t(tails.size()) <= k_max_tails);
      ++n_tails;
    } else {
      AGENTQ_KV_ASSERT(int32_t(e.tokens.size()) == pool_.block_size());
    }
  }
  AGENTQ_KV_ASSERT(n_tails == n_tails_);
  size_t n_children = 0;
  for (const auto& [parent, kids] : children_) n_children += kids.size();
  AGENTQ_KV_ASSERT(n_children == entries_.size());
  size_t n_listed_tails = 0;
  for (const auto& [parent, tails] : tails_) n_listed_tails += tails.size();
  AGENTQ_KV_ASSERT(n_listed_tails == size_t(n_tails_));
}

}  // namespace agentq
