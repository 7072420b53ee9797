// Prefix index over token ids at block granularity: a hash chain
// hash(parent_hash, block tokens) -> block, tokens verified on every hit. Lets a new
// sequence (the next turn of a job, or another job with the same system prompt and
// tools) reuse every cached full block. The cache holds one reference per cached
// block; blocks nobody else references are evicted least-recently-used first.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"

namespace agentq {

struct prefix_match {
  std::vector<int32_t> blocks;    // cached blocks, in order
  std::vector<uint64_t> hashes;   // their chain hashes
  int32_t n_tokens = 0;           // blocks.size() * block_size
};

class prefix_cache {
 public:
  static constexpr uint64_t root_hash = 0xcbf29ce484222325ull;  // parent of the first block

  explicit prefix_cache(block_pool& pool) : pool_(pool) {}
  prefix_cache(const prefix_cache&) = delete;
  prefix_cache& operator=(const prefix_cache&) = delete;

  // Chain hash of one block of tokens after the block whose hash is parent (FNV-1a 64).
  static uint64_t hash_block(uint64_t parent, std::span<const token_id> tokens);

  // The longest chain of cached full blocks that is a prefix of tokens, covering at most
  // max_tokens tokens. Marks the hit blocks as recently used. Takes no references: the
  // caller attaches them to a sequence (block_pool::attach) before anything can evict.
  prefix_match lookup(std::span<const token_id> tokens, int32_t max_tokens);

  // Register block_idx as holding the full block `tokens` after parent; returns the chain
  // hash. When that chain position is already cached (perhaps in another block), keeps the
  // existing entry and only marks it used.
  uint64_t insert(uint64_t parent, std::span<const token_id> tokens, int32_t block_idx);

  // Evict the least recently used block that only the cache references; false when none.
  // Never touches a block in use.
  bool evict_one();
  // Evict every block only the cache references.
  void evict_all_unused();

  int32_t n_cached() const { return int32_t(entries_.size()); }
  int32_t n_unreferenced() const;      // cached blocks only the cache holds (evictable)
  int64_t n_evictions() const { return n_evictions_; }
  int64_t n_hits() const { return n_hits_; }         // blocks served by lookups
  bool contains_block(int32_t block_idx) const { return by_block_.count(block_idx) != 0; }

  // Every entry is held in the pool, block <-> hash maps agree, LRU list matches the map,
  // and each key is the hash of its entry's (parent, tokens).
  void sanity() const;

 private:
  struct entry {
    int32_t block_idx = -1;
    uint64_t parent = 0;
    std::vector<token_id> tokens;
    std::list<uint64_t>::iterator lru_it;
  };
  void touch(entry& e, uint64_t hash);
  void erase(uint64_t hash);

  block_pool& pool_;
  std::unordered_map<uint64_t, entry> entries_;
  std::unordered_map<int32_t, uint64_t> by_block_;
  std::list<uint64_t> lru_;  // front = least recently used
  int64_t n_evictions_ = 0;
  int64_t n_hits_ = 0;
};

}  // namespace agentq
