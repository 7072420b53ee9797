// The pool of paged-KV blocks: a free list, reference counts, per-sequence block
// tables and copy-on-write of shared blocks. The prefix cache and parked jobs hold
// blocks through the same reference counts; the memory itself is a kv_memory (a host
// kv_store, or the CUDA backend's device blocks), and every copy goes through it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "agentq/engine.h"
#include "kv/kv_store.h"

namespace agentq {

// Always-on invariant check: prints expression, file and line, then aborts.
[[noreturn]] void kv_assert_fail(const char* expr, const char* file, int line);
#define AGENTQ_KV_ASSERT(x) ((x) ? (void)0 : ::agentq::kv_assert_fail(#x, __FILE__, __LINE__))

// One sequence's block table. Positions [0, n_tokens) hold valid K/V; blocks cover
// at least that many positions (reserve() may add room beyond it).
struct seq_blocks {
  std::vector<int32_t> blocks;  // physical block ids, one per block_size positions
  int32_t n_tokens = 0;         // positions with valid K/V (tokens)
  bool live = false;            // slot in use
  // Windowed KV: blocks [window_from, blocks.size()) are in the window (their windowed layers
  // hold pages); earlier ones may have given those pages back. kv_layout::window_block(n_tokens).
  int32_t window_from = 0;
};

class block_pool {
 public:
  // n_blocks: how many blocks the store holds (see blocks_for_budget); the pool owns a host kv_store.
  block_pool(kv_layout layout, int32_t n_blocks);
  // Blocks living in memory (e.g. on a device), which must outlive the pool.
  explicit block_pool(kv_memory& memory);

  // Blocks that fit in budget_bytes for this layout (at least 1).
  static int32_t blocks_for_budget(const kv_layout& layout, uint64_t budget_bytes);

  // The host store (the CPU model's K/V); asserts the blocks live in host memory.
  kv_store& store();
  const kv_store& store() const { return const_cast<block_pool*>(this)->store(); }
  kv_memory& memory() const { return *mem_; }
  const kv_layout& layout() const { return mem_->layout(); }
  int32_t block_size() const { return mem_->layout().block_size; }
  // Capacity and use in blocks of every layer (windowed stores: pages / n_layer, so a block
  // holding only its full layers counts as a fraction).
  int32_t n_blocks_total() const { return paged_ ? paged_->n_pages() / layout().n_layer : mem_->n_blocks(); }
  int32_t n_blocks_free() const {
    return paged_ ? int32_t(free_pages_.size()) / layout().n_layer : int32_t(free_.size());
  }
  int32_t n_blocks_used() const { return n_blocks_total() - n_blocks_free(); }
  // Block ids (>= n_blocks_total() with windowed KV).
  int32_t n_block_ids() const { return mem_->n_blocks(); }
  // Windowed KV: pages held (one layer's K and V of one block each), and in total.
  bool windowed() const { return paged_ != nullptr; }
  int64_t n_pages_used() const { return paged_ ? paged_->n_pages() - int64_t(free_pages_.size()) : 0; }
  // Windowed: blocks whose windowed pages the prefix cache keeps past every window (reclaimed
  // first under pressure), and how many were taken back so far.
  int64_t n_pages_lingering() const;
  int64_t n_lingering_released() const { return n_lingering_released_; }
  // Whether a sequence of n_tokens fits in an empty pool (its full layers on every block, its
  // windowed layers on the window's blocks).
  bool fits(int32_t n_tokens) const;
  // The pool's geometry for kv_room::fits (what a worker advertises; fits() is room().fits(n_layer, ..)).
  kv_room room() const;
  int32_t blocks_for_tokens(int32_t n_tokens) const { return (n_tokens + block_size() - 1) / block_size(); }

  // Called when the free list is empty; frees at least one block (e.g. evicts the LRU
  // cached block, reclaims a parked job) and returns true, or false when it cannot.
  void set_evictor(std::function<bool()> evictor) { evictor_ = std::move(evictor); }

  // Sequences (block tables). create_seq returns a slot index; free_seq drops every reference.
  int32_t create_seq();
  void free_seq(int32_t seq_idx);
  const seq_blocks& seq(int32_t seq_idx) const { return seqs_[size_t(seq_idx)]; }
  int32_t n_seqs_live() const;

  // Give an empty seq the (shared) blocks of a cached prefix covering n_tokens positions.
  void attach(int32_t seq_idx, std::span<const int32_t> blocks, int32_t n_tokens);
  // A new seq sharing every block of src (copy-on-write on the next write into a shared block).
  int32_t fork(int32_t src_seq_idx);
  // Make room to write positions [n_tokens, n_tokens_total): allocates blocks and copies a
  // shared partially-filled last block (copy-on-write). false when the pool is exhausted even
  // after evicting (blocks already obtained stay; the caller preempts and retries).
  bool reserve(int32_t seq_idx, int32_t n_tokens_total);
  // Blocks reserve() would need to allocate for n_tokens_total (incl. a copy-on-write block).
  int32_t blocks_needed(int32_t seq_idx, int32_t n_tokens_total) const;
  // Record that positions [0, n_tokens) now hold K/V (after a forward). n_tokens <= capacity.
  void set_n_tokens(int32_t seq_idx, int32_t n_tokens);
  // Forget positions >= n_tokens and drop blocks beyond them. Returns the positions kept: with
  // windowed KV, fewer than n_tokens (down to 0) when the window of n_tokens would reach blocks
  // whose windowed layers were already given back (the caller recomputes from there).
  int32_t truncate(int32_t seq_idx, int32_t n_tokens);
  // The longest prefix, at most n_tokens, of a sequence made of `blocks` whose window blocks all
  // hold their windowed layers (n_tokens itself, or a block multiple below it; always n_tokens
  // without windowed KV). For prefix-cache hits.
  int32_t usable_prefix(std::span<const int32_t> blocks, int32_t n_tokens) const;
  // Like reserve() for a sequence about to be restored from the disk tier: blocks before
  // whole_from get their full layers only (whole_from <= window_block(n_tokens_total); the
  // next set_n_tokens gives back the extra). Only on an empty seq.
  bool reserve_restore(int32_t seq_idx, int32_t n_tokens_total, int32_t whole_from);

  // Reference counts. A block is free iff its count is 0.
  int32_t refcount(int32_t block_idx) const { return refs_[size_t(block_idx)]; }
  // The prefix cache's hold on a block (one per block at most).
  void cache_hold(int32_t block_idx);
  void cache_drop(int32_t block_idx);
  bool cache_held(int32_t block_idx) const { return cache_held_[size_t(block_idx)]; }
  // Blocks only the cache holds (held, refcount 1: evictable), kept as counts change: the
  // engine's stats read it every step, and a scan of the cache was O(cached blocks).
  int32_t n_cache_only() const { return n_cache_only_; }

  // A fresh block with refcount 1 owned by the caller (not in any table); -1 when full.
  int32_t allocate_raw();  // -1 when full
  void unref(int32_t block_idx);
  // Copy the first n_rows token rows of K and V, every layer, from src to dst.
  void copy_rows(int32_t src_block, int32_t dst_block, int32_t n_rows);

  int64_t n_cow_copies() const { return n_cow_copies_; }

  // Check every invariant: refcount == occurrences in live tables + cache hold; free list
  // holds exactly the blocks with refcount 0, no duplicates; tables cover n_tokens.
  void sanity() const;

 private:
  void init();
  int32_t pop_free(bool windowed_layers = true);  // -1 when empty after asking the evictor
  void add_ref(int32_t block_idx);  // ++refcount of a block in use (keeps n_cache_only_)
  // Windowed KV: a seq's window now covers / no longer covers block b. The last to leave gives
  // the windowed layers' pages back, or, when the prefix cache holds b, leaves them lingering:
  // a later prefix hit ending near b needs them, and pop_free takes lingering pages back (oldest
  // first) before it asks the evictor for whole blocks.
  void window_enter(int32_t block_idx);
  void window_leave(int32_t block_idx);
  bool release_lingering();  // false when none lingers
  void release_pages(int32_t block_idx, bool windowed_only);
  bool has_window_pages(int32_t block_idx) const;
  // Move s.window_from to window_block(s.n_tokens) (forward: leave; backward: enter).
  void slide(seq_blocks& s);

  std::unique_ptr<kv_store> owned_;  // the host store of block_pool(layout, n_blocks)
  kv_memory* mem_;
  std::vector<int32_t> refs_;        // [n_blocks]
  std::vector<uint8_t> cache_held_;  // [n_blocks]
  std::vector<int32_t> free_;        // stack of free block ids
  kv_page_table* paged_ = nullptr;   // the memory's page table, when its layout is windowed (host or device)
  std::vector<int32_t> free_pages_;  // windowed: stack of free pages
  std::vector<int32_t> win_users_;   // windowed: [n_block_ids] seq tables whose window covers the block
  std::vector<uint8_t> lingering_;   // windowed: [n_block_ids] cache-held, in no window, windowed pages kept
  std::deque<int32_t> lingering_order_;  // lingering blocks, oldest first (stale entries skipped)
  int64_t n_lingering_released_ = 0;
  std::vector<seq_blocks> seqs_;     // slots; !live ones are reusable
  std::vector<int32_t> free_seq_slots_;
  std::function<bool()> evictor_;
  int64_t n_cow_copies_ = 0;
  int32_t n_cache_only_ = 0;
};

}  // namespace agentq
