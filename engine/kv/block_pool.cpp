// Block pool: free list, reference counts, block tables and copy-on-write.
#include "kv/block_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace agentq {

void kv_assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "AGENTQ_KV_ASSERT(%s) failed at %s:%d\n", expr, file, line);
  std::abort();
}

block_pool::block_pool(kv_layout layout, int32_t n_blocks)
    : owned_(std::make_unique<kv_store>(layout, n_blocks)), mem_(owned_.get()) {
  init();
}

block_pool::block_pool(kv_memory& memory) : mem_(&memory) { init(); }

void block_pool::init() {
  const int32_t n_blocks = mem_->n_blocks();
  AGENTQ_KV_ASSERT(n_blocks > 0 && mem_->layout().block_size > 0);
  refs_.assign(size_t(n_blocks), 0);
  cache_held_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  // NOTE: pushed in reverse so blocks are handed out 0, 1, 2, ... (easy to read in tests).
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
  // NOTE: the same bookkeeping for host and device pages: only the memory differs.
  if (kv_page_table* t = mem_->pages()) {
    AGENTQ_KV_ASSERT(t->n_block_ids() == n_blocks && t->n_layer() == mem_->layout().n_layer);
    paged_ = t;
    win_users_.assign(size_t(n_blocks), 0);
    lingering_.assign(size_t(n_blocks), 0);
    free_pages_.reserve(size_t(t->n_pages()));
    for (int32_t p = t->n_pages() - 1; p >= 0; --p) free_pages_.push_back(p);
  }
}

bool kv_room::fits(int32_t n_layer, int64_t n_tokens) const {
  if (block_size <= 0 || n_pages <= 0 || n_layer <= 0 || n_tokens < 0) return false;
  // NOTE: the window's blocks are all allocated whole while a chunk is written; one chunk spans
  // at most blocks_for_tokens(n_tokens) of them, so count the worst case: every block whole
  // until the window, then full layers only.
  const int64_t nb = (n_tokens + block_size - 1) / block_size;
  const int64_t n_win = window > 0 ? std::clamp<int64_t>(n_layer_windowed, 0, n_layer) : 0;
  int64_t nb_win = nb;
  if (n_win > 0) {
    const int64_t wb = n_tokens + 1 - window > 0 ? (n_tokens + 1 - window) / block_size : 0;  // kv_layout::window_block
    nb_win = std::min<int64_t>(nb, nb - wb + 1);
  }
  return nb * (n_layer - n_win) + nb_win * n_win <= n_pages;
}

kv_room block_pool::room() const {
  const kv_layout& l = layout();
  if (!paged_) return {l.block_size, int64_t(mem_->n_blocks()) * l.n_layer, 0, 0};
  return {l.block_size, paged_->n_pages(), l.window, l.n_layer_windowed()};
}

bool block_pool::fits(int32_t n_tokens) const { return room().fits(layout().n_layer, n_tokens); }

bool block_pool::has_window_pages(int32_t b) const {
  if (!paged_) return true;
  const kv_layout& l = layout();
  for (int32_t il = 0; il < l.n_layer; ++il)
    if (l.layer_windowed[size_t(il)] && paged_->page(b, il) < 0) return false;
  return true;
}

void block_pool::release_pages(int32_t b, bool windowed_only) {
  const kv_layout& l = layout();
  for (int32_t il = 0; il < l.n_layer; ++il) {
    if (windowed_only && !l.layer_windowed[size_t(il)]) continue;
    const int32_t p = paged_->page(b, il);
    if (p < 0) continue;
    free_pages_.push_back(p);
    paged_->set_page(b, il, -1);
  }
}

void block_pool::window_enter(int32_t b) {
  AGENTQ_KV_ASSERT(has_window_pages(b));
  ++win_users_[size_t(b)];
  lingering_[size_t(b)] = 0;  // its deque entry goes stale
}

void block_pool::window_leave(int32_t b) {
  AGENTQ_KV_ASSERT(win_users_[size_t(b)] > 0);
  if (--win_users_[size_t(b)] > 0) return;
  if (cache_held_[size_t(b)]) {
    lingering_[size_t(b)] = 1;
    lingering_order_.push_back(b);
    if (lingering_order_.size() > 2 * lingering_.size() + 64) {  // drop stale entries, keep the order
      std::vector<uint8_t> seen(lingering_.size(), 0);
      std::deque<int32_t> kept;
      for (int32_t x : lingering_order_)
        if (lingering_[size_t(x)] && !seen[size_t(x)]) {
          seen[size_t(x)] = 1;
          kept.push_back(x);
        }
      lingering_order_.swap(kept);
    }
  } else {
    release_pages(b, true);
  }
}

int64_t block_pool::n_pages_lingering() const {
  int64_t n = 0;
  for (size_t b = 0; b < lingering_.size(); ++b) n += lingering_[b] ? layout().n_layer_windowed() : 0;
  return n;
}

bool block_pool::release_lingering() {
  while (!lingering_order_.empty()) {
    const int32_t b = lingering_order_.front();
    lingering_order_.pop_front();
    if (!lingering_[size_t(b)]) continue;  // stale: re-entered a window or left the cache
    lingering_[size_t(b)] = 0;
    release_pages(b, true);
    ++n_lingering_released_;
    return true;
  }
  return false;
}

void block_pool::slide(seq_blocks& s) {
  if (!paged_) return;
  const int32_t to = std::min<int32_t>(layout().window_block(s.n_tokens), int32_t(s.blocks.size()));
  for (int32_t i = s.window_from; i < to; ++i) window_leave(s.blocks[size_t(i)]);
  for (int32_t i = to; i < s.window_from; ++i) window_enter(s.blocks[size_t(i)]);
  s.window_from = to;
}

int32_t block_pool::blocks_for_budget(const kv_layout& layout, uint64_t budget_bytes) {
  const uint64_t per = uint64_t(layout.block_bytes());
  if (per == 0) return 1;
  uint64_t n = budget_bytes / per;
  if (n > uint64_t(INT32_MAX / 2)) n = INT32_MAX / 2;
  return std::max<int32_t>(1, int32_t(n));
}

int32_t block_pool::create_seq() {
  int32_t idx;
  if (!free_seq_slots_.empty()) {
    idx = free_seq_slots_.back();
    free_seq_slots_.pop_back();
  } else {
    idx = int32_t(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[size_t(idx)] = seq_blocks{};
  seqs_[size_t(idx)].live = true;
  return idx;
}

void block_pool::free_seq(int32_t seq_idx) {
  auto& s = seqs_[size_t(seq_idx)];
  AGENTQ_KV_ASSERT(s.live);
  if (paged_)
    for (size_t i = size_t(s.window_from); i < s.blocks.size(); ++i) window_leave(s.blocks[i]);
  // NOTE: released tail first so that, with a LIFO free list, a prefix's head blocks are the
  // last to be reused.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) unref(*it);
  s = seq_blocks{};
  free_seq_slots_.push_back(seq_idx);
}

int32_t block_pool::n_seqs_live() const {
  int32_t n = 0;
  for (const auto& s : seqs_) n += s.live ? 1 : 0;
  return n;
}

void block_pool::attach(int32_t seq_idx, std::span<const int32_t> blocks, int32_t n_tokens) {
  auto& s = seqs_[size_t(seq_idx)];
  AGENTQ_KV_ASSERT(s.live && s.blocks.empty() && s.n_tokens == 0);
  AGENTQ_KV_ASSERT(n_tokens <= int32_t(blocks.size()) * block_size());
  for (int32_t b : blocks) {
    AGENTQ_KV_ASSERT(refs_[size_t(b)] > 0);
    add_ref(b);
    s.blocks.push_back(b);
  }
  s.n_tokens = n_tokens;
  if (paged_) {
    s.window_from = std::min<int32_t>(layout().window_block(n_tokens), int32_t(s.blocks.size()));
    for (size_t i = size_t(s.window_from); i < s.blocks.size(); ++i) window_enter(s.blocks[i]);
  }
}

int32_t block_pool::fork(int32_t src_seq_idx) {
  const int32_t idx = create_seq();
  const auto& src = seqs_[size_t(src_seq_idx)];  // after create_seq: seqs_ may have grown
  AGENTQ_KV_ASSERT(src.live);
  auto& dst = seqs_[size_t(idx)];
  dst.blocks = src.blocks;
  dst.n_tokens = src.n_tokens;
  dst.window_from = src.window_from;
  for (int32_t b : dst.blocks) add_ref(b);
  if (paged_)
    for (size_t i = size_t(dst.window_from); i < dst.blocks.size(); ++i) window_enter(dst.blocks[i]);
  return idx;
}

void block_pool::add_ref(int32_t block_idx) {
  if (cache_held_[size_t(block_idx)] && refs_[size_t(block_idx)] == 1) --n_cache_only_;
  ++refs_[size_t(block_idx)];
}

int32_t block_pool::pop_free(bool windowed_layers) {
  const kv_layout& l = layout();
  const size_t n_pages = paged_ ? size_t(windowed_layers ? l.n_layer : l.n_layer_full()) : 0;
  while (free_.empty() || free_pages_.size() < n_pages) {
    // NOTE: first the windowed pages the prefix cache keeps past every window (a later prefix
    // hit ending there would need them), then the evictor's whole blocks.
    if (free_pages_.size() < n_pages && release_lingering()) continue;
    if (!evictor_ || !evictor_()) return -1;
  }
  const int32_t b = free_.back();
  free_.pop_back();
  AGENTQ_KV_ASSERT(refs_[size_t(b)] == 0);
  refs_[size_t(b)] = 1;
  if (paged_) {
    for (int32_t il = 0; il < l.n_layer; ++il) {
      AGENTQ_KV_ASSERT(paged_->page(b, il) < 0);
      if (!windowed_layers && l.layer_windowed[size_t(il)]) continue;
      paged_->set_page(b, il, free_pages_.back());
      free_pages_.pop_back();
    }
  }
  return b;
}

int32_t block_pool::allocate_raw() { return pop_free(); }

void block_pool::unref(int32_t block_idx) {
  auto& r = refs_[size_t(block_idx)];
  AGENTQ_KV_ASSERT(r > 0);
  if (--r == 1 && cache_held_[size_t(block_idx)]) ++n_cache_only_;
  if (r == 0) {
    AGENTQ_KV_ASSERT(!cache_held_[size_t(block_idx)]);
    if (paged_) {
      AGENTQ_KV_ASSERT(win_users_[size_t(block_idx)] == 0);
      release_pages(block_idx, false);
    }
    free_.push_back(block_idx);
  }
}

void block_pool::cache_hold(int32_t block_idx) {
  AGENTQ_KV_ASSERT(!cache_held_[size_t(block_idx)] && refs_[size_t(block_idx)] > 0);
  cache_held_[size_t(block_idx)] = 1;
  ++refs_[size_t(block_idx)];  // >= 2: the block is in use besides the cache
}

void block_pool::cache_drop(int32_t block_idx) {
  AGENTQ_KV_ASSERT(cache_held_[size_t(block_idx)]);
  if (refs_[size_t(block_idx)] == 1) --n_cache_only_;
  cache_held_[size_t(block_idx)] = 0;
  if (paged_ && win_users_[size_t(block_idx)] == 0) {
    lingering_[size_t(block_idx)] = 0;
    release_pages(block_idx, true);
  }
  unref(block_idx);
}

kv_store& block_pool::store() {
  kv_store* s = mem_->host();
  AGENTQ_KV_ASSERT(s != nullptr);
  return *s;
}

void block_pool::copy_rows(int32_t src, int32_t dst, int32_t n_rows) { mem_->copy_rows(src, dst, n_rows); }

int32_t block_pool::blocks_needed(int32_t seq_idx, int32_t n_tokens_total) const {
  const auto& s = seqs_[size_t(seq_idx)];
  const int32_t have = int32_t(s.blocks.size());
  int32_t need = std::max(0, blocks_for_tokens(n_tokens_total) - have);
  const int32_t bs = block_size();
  // the block the next write lands in, if shared, is copied first
  if (n_tokens_total > s.n_tokens && s.n_tokens / bs < have && refs_[size_t(s.blocks[size_t(s.n_tokens / bs)])] > 1)
    ++need;
  return need;
}

bool block_pool::reserve(int32_t seq_idx, int32_t n_tokens_total) {
  AGENTQ_KV_ASSERT(seqs_[size_t(seq_idx)].live);
  const int32_t bs = block_size();
  {
    // copy-on-write: every existing block that positions [n_tokens, n_tokens_total) write into
    // must be private. Only the block holding n_tokens can be partially filled and shared
    // (later ones were reserved by this seq alone), but check them all: truncate() may leave
    // shared blocks past n_tokens.
    auto& s = seqs_[size_t(seq_idx)];
    const int32_t first = s.n_tokens / bs;
    const int32_t last = std::min<int32_t>(int32_t(s.blocks.size()), blocks_for_tokens(n_tokens_total));
    for (int32_t i = first; i < last && n_tokens_total > s.n_tokens; ++i) {
      const int32_t old = seqs_[size_t(seq_idx)].blocks[size_t(i)];
      if (refs_[size_t(old)] <= 1) continue;
      const int32_t fresh = pop_free();
      if (fresh < 0) return false;
      auto& s2 = seqs_[size_t(seq_idx)];
      const int32_t rows = std::clamp(s2.n_tokens - i * bs, 0, bs);
      if (rows > 0) copy_rows(old, fresh, rows);
      s2.blocks[size_t(i)] = fresh;
      if (paged_ && i >= s2.window_from) {
        window_enter(fresh);
        window_leave(old);
      }
      unref(old);
      ++n_cow_copies_;
    }
  }
  while (int32_t(seqs_[size_t(seq_idx)].blocks.size()) < blocks_for_tokens(n_tokens_total)) {
    const int32_t b = pop_free();
    if (b < 0) return false;
    auto& s = seqs_[size_t(seq_idx)];
    if (paged_ && int32_t(s.blocks.size()) >= s.window_from) window_enter(b);
    s.blocks.push_back(b);
  }
  return true;
}

bool block_pool::reserve_restore(int32_t seq_idx, int32_t n_tokens_total, int32_t whole_from) {
  auto& s0 = seqs_[size_t(seq_idx)];
  AGENTQ_KV_ASSERT(s0.live && s0.blocks.empty() && s0.n_tokens == 0);
  if (!paged_) return reserve(seq_idx, n_tokens_total);
  AGENTQ_KV_ASSERT(whole_from <= layout().window_block(n_tokens_total));
  const int32_t from = std::min(whole_from, blocks_for_tokens(n_tokens_total));
  s0.window_from = from;
  while (int32_t(seqs_[size_t(seq_idx)].blocks.size()) < blocks_for_tokens(n_tokens_total)) {
    const bool whole = int32_t(seqs_[size_t(seq_idx)].blocks.size()) >= from;
    const int32_t b = pop_free(whole);
    if (b < 0) return false;
    auto& s = seqs_[size_t(seq_idx)];
    if (whole) window_enter(b);
    s.blocks.push_back(b);
  }
  return true;
}

void block_pool::set_n_tokens(int32_t seq_idx, int32_t n_tokens) {
  auto& s = seqs_[size_t(seq_idx)];
  AGENTQ_KV_ASSERT(s.live && n_tokens >= 0 && n_tokens <= int32_t(s.blocks.size()) * block_size());
  s.n_tokens = n_tokens;
  slide(s);
}

int32_t block_pool::usable_prefix(std::span<const int32_t> blocks, int32_t n_tokens) const {
  if (!paged_) return n_tokens;
  const int32_t bs = block_size();
  auto ok = [&](int32_t n) {
    const int32_t end = std::min<int32_t>(blocks_for_tokens(n), int32_t(blocks.size()));
    for (int32_t i = layout().window_block(n); i < end; ++i)
      if (!has_window_pages(blocks[size_t(i)])) return false;
    return true;
  };
  if (ok(n_tokens)) return n_tokens;
  for (int32_t k = (n_tokens - 1) / bs; k > 0; --k)
    if (ok(k * bs)) return k * bs;
  return 0;
}

int32_t block_pool::truncate(int32_t seq_idx, int32_t n_tokens) {
  auto& s = seqs_[size_t(seq_idx)];
  AGENTQ_KV_ASSERT(s.live && n_tokens >= 0);
  s.n_tokens = std::min(s.n_tokens, n_tokens);
  if (paged_) s.n_tokens = usable_prefix(s.blocks, s.n_tokens);
  const int32_t keep = blocks_for_tokens(s.n_tokens);
  while (int32_t(s.blocks.size()) > keep) {
    const int32_t b = s.blocks.back();
    if (paged_ && int32_t(s.blocks.size()) - 1 >= s.window_from) window_leave(b);
    s.blocks.pop_back();
    unref(b);
  }
  if (paged_) {
    s.window_from = std::min(s.window_from, int32_t(s.blocks.size()));
    slide(s);
  }
  return s.n_tokens;
}

void block_pool::sanity() const {
  const int32_t n = n_block_ids();
  std::vector<int32_t> count(size_t(n), 0);
  for (const auto& s : seqs_) {
    if (!s.live) {
      AGENTQ_KV_ASSERT(s.blocks.empty() && s.n_tokens == 0);
      continue;
    }
    AGENTQ_KV_ASSERT(s.n_tokens >= 0 && s.n_tokens <= int32_t(s.blocks.size()) * block_size());
    for (int32_t b : s.blocks) {
      AGENTQ_KV_ASSERT(b >= 0 && b < n);
      ++count[size_t(b)];
    }
  }
  for (int32_t b = 0; b < n; ++b) count[size_t(b)] += cache_held_[size_t(b)] ? 1 : 0;
  std::vector<uint8_t> in_free(size_t(n), 0);
  for (int32_t b : free_) {
    AGENTQ_KV_ASSERT(b >= 0 && b < n);
    AGENTQ_KV_ASSERT(!in_free[size_t(b)]);  // no duplicates
    in_free[size_t(b)] = 1;
  }
  int32_t cache_only = 0;
  for (int32_t b = 0; b < n; ++b) {
    AGENTQ_KV_ASSERT(refs_[size_t(b)] == count[size_t(b)]);
    AGENTQ_KV_ASSERT((refs_[size_t(b)] == 0) == bool(in_free[size_t(b)]));
    cache_only += cache_held_[size_t(b)] && refs_[size_t(b)] == 1 ? 1 : 0;
  }
  AGENTQ_KV_ASSERT(cache_only == n_cache_only_);
  if (paged_) {
    // window users match the tables; a block in a window holds every page; pages are each in
    // one place (a block's layer or the free list); only cached or windowed blocks keep window pages.
    std::vector<int32_t> users(size_t(n), 0);
    for (const auto& s : seqs_) {
      if (!s.live) continue;
      AGENTQ_KV_ASSERT(s.window_from >= 0 && s.window_from <= int32_t(s.blocks.size()));
      for (size_t i = size_t(s.window_from); i < s.blocks.size(); ++i) ++users[size_t(s.blocks[i])];
    }
    std::vector<uint8_t> seen(size_t(paged_->n_pages()), 0);
    for (int32_t p : free_pages_) {
      AGENTQ_KV_ASSERT(!seen[size_t(p)]);
      seen[size_t(p)] = 1;
    }
    for (int32_t b = 0; b < n; ++b) {
      AGENTQ_KV_ASSERT(users[size_t(b)] == win_users_[size_t(b)]);
      if (users[size_t(b)] > 0) AGENTQ_KV_ASSERT(has_window_pages(b));
      if (lingering_[size_t(b)])
        AGENTQ_KV_ASSERT(cache_held_[size_t(b)] && users[size_t(b)] == 0 && has_window_pages(b));
      // windowed pages outside every window only while the cache keeps them (lingering)
      if (users[size_t(b)] == 0 && refs_[size_t(b)] > 0 && !lingering_[size_t(b)])
        for (int32_t il = 0; il < layout().n_layer; ++il)
          if (layout().layer_windowed[size_t(il)]) AGENTQ_KV_ASSERT(paged_->page(b, il) < 0);
      for (int32_t il = 0; il < layout().n_layer; ++il) {
        const int32_t p = paged_->page(b, il);
        if (refs_[size_t(b)] > 0 && !layout().layer_windowed[size_t(il)]) AGENTQ_KV_ASSERT(p >= 0);
        if (refs_[size_t(b)] == 0) AGENTQ_KV_ASSERT(p < 0);
        if (p < 0) continue;
        AGENTQ_KV_ASSERT(!seen[size_t(p)]);
        seen[size_t(p)] = 1;
      }
    }
    for (uint8_t x : seen) AGENTQ_KV_ASSERT(x);
  }
  for (int32_t slot : free_seq_slots_) AGENTQ_KV_ASSERT(!seqs_[size_t(slot)].live);
}

}  // namespace agentq
