// Prefix index over token ids at block granularity: a hash chain
// hash(parent_hash, block tokens) -> block, tokens verified on every hit. Lets a new
// sequence (the next turn of a job, or another job with the same system prompt and
// tools) reuse every cached full block, and then the longest common run of one more
// cached block under the same parent: a full block that matches only in part, or a
// "tail" (the partly filled last block a finished sequence left: prefix_tail.cpp), whose
// matching rows the new sequence copies into its own block (block_pool's copy-on-write).
// The cache holds one reference per cached block; blocks nobody else references are
// evicted least-recently-used first.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"

namespace agentq {

struct prefix_match {
  std::vector<int32_t> blocks;    // cached blocks, in order (the last one partly used when n_partial > 0)
  std::vector<uint64_t> hashes;   // the chain hashes of the wholly used blocks (hashes.size() full blocks)
  int32_t n_partial = 0;          // tokens used of the last block (a partial match), 0: every block whole
  int32_t n_tokens = 0;           // hashes.size() * block_size + n_partial
};

class prefix_cache {
 public:
  static constexpr uint64_t root_hash = 0xcbf29ce484222325ull;  // parent of the first block

  explicit prefix_cache(block_pool& pool) : pool_(pool) {}
  prefix_cache(const prefix_cache&) = delete;
  prefix_cache& operator=(const prefix_cache&) = delete;

  // Chain hash of one block of tokens after the block whose hash is parent (FNV-1a 64).
  static uint64_t hash_block(uint64_t parent, std::span<const token_id> tokens);

  // The longest chain of cached full blocks that is a prefix of tokens, then the cached child
  // of that chain (a tail or a full block) sharing the longest run with the next tokens (a
  // partial match, never on a windowed pool), covering at most max_tokens tokens. Marks the
  // hit blocks as recently used. Takes no references: the caller attaches them to a sequence
  // (block_pool::attach) before anything can evict; its first write copies the partial block.
  prefix_match lookup(std::span<const token_id> tokens, int32_t max_tokens);

  // Register block_idx as holding the full block `tokens` after parent; returns the chain
  // hash. When that chain position is already cached (perhaps in another block), keeps the
  // existing entry and only marks it used.
  uint64_t insert(uint64_t parent, std::span<const token_id> tokens, int32_t block_idx);

  // Register block_idx, the partly filled last block of a sequence whose K/V is no longer
  // written (it ends or is parked), as holding `tokens` (1..block_size-1 rows) after parent.
  // Kept only when it adds tokens no other child of parent has (at most k_max_tails per
  // parent, the least recently used given back first); false when not kept, and always on a
  // windowed pool. prefix_tail.cpp.
  bool insert_tail(uint64_t parent, std::span<const token_id> tokens, int32_t block_idx);
  // The owner of block_idx is about to append to it (its job's next turn): drop the cache's
  // tail entry for it, so the append writes in place instead of copying. false if not a tail.
  bool take_tail(int32_t block_idx);
  static constexpr int32_t k_max_tails = 4;  // tails kept per parent

  // Evict the least recently used block that only the cache references; false when none.
  // Never touches a block in use.
  bool evict_one();
  // Evict every block only the cache references.
  void evict_all_unused();

  int32_t n_cached() const { return int32_t(entries_.size()); }
  int32_t n_unreferenced() const;      // cached blocks only the cache holds (evictable)
  int64_t n_evictions() const { return n_evictions_; }
  int64_t n_hits() const { return n_hits_; }         // blocks served whole by lookups
  int64_t n_partial_hits() const { return n_partial_hits_; }  // lookups that ended in a partial block
  int64_t n_partial_tokens() const { return n_partial_tokens_; }  // tokens those served
  int32_t n_tails() const { return n_tails_; }        // cached tail entries
  bool contains_block(int32_t block_idx) const { return by_block_.count(block_idx) != 0; }

  // Every entry is held in the pool, block <-> hash maps agree, LRU list matches the map,
  // each key is the hash of its entry's (parent, tokens), each entry is listed once under its
  // parent, tails hold 1..block_size-1 tokens and only on a pool that is not windowed.
  void sanity() const;

 private:
  struct entry {
    int32_t block_idx = -1;
    uint64_t parent = 0;
    std::vector<token_id> tokens;      // block_size tokens, or fewer for a tail
    std::list<uint64_t>::iterator lru_it;
    uint64_t last_use = 0;             // use_clock_ at the last touch (LRU among one parent's tails)
    bool tail = false;                 // a partly filled last block (insert_tail)
  };
  void touch(entry& e, uint64_t hash);
  void erase(uint64_t hash);
  void add_entry(uint64_t hash, entry e);
  // The cached child of parent sharing the longest run with tokens (at most max_tokens); its
  // hash and that run's length (0: none). prefix_tail.cpp.
  std::pair<uint64_t, int32_t> best_child(uint64_t parent, std::span<const token_id> tokens, int32_t max_tokens) const;

  block_pool& pool_;
  std::unordered_map<uint64_t, entry> entries_;
  std::unordered_map<int32_t, uint64_t> by_block_;
  std::list<uint64_t> lru_;  // front = least recently used
  std::unordered_map<uint64_t, std::vector<uint64_t>> children_;  // parent hash -> its entries' hashes, oldest first
  std::unordered_map<uint64_t, std::vector<uint64_t>> tails_;     // parent hash -> its tails' hashes (<= k_max_tails)
  uint64_t use_clock_ = 0;
  int64_t n_evictions_ = 0;
  int64_t n_hits_ = 0;
  int64_t n_partial_hits_ = 0, n_partial_tokens_ = 0;
  int32_t n_tails_ = 0;
};

}  // namespace agentq
