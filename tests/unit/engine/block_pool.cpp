// Block pool and prefix cache: randomised tests against trivially correct models,
// with sanity() after every mutation; copy-on-write keeps every sequence's K/V intact.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv_stamp.h"

using namespace agentq;
using test::append;
using test::stamp;

namespace {

kv_layout tiny_layout(int32_t block_size) { return {2, 1, 2, block_size}; }

bool stamped(const block_pool& pool, int32_t block, int32_t row, float v) {
  for (int32_t l = 0; l < pool.layout().n_layer; ++l)
    if (!test::stamped_in(pool, l, block, row, v)) return false;
  return true;
}
bool matches(const block_pool& pool, int32_t seq, const std::vector<int32_t>& vals) {
  const auto& s = pool.seq(seq);
  if (s.n_tokens != int32_t(vals.size())) return false;
  const int32_t bs = pool.block_size();
  for (int32_t pos = 0; pos < s.n_tokens; ++pos)
    if (!stamped(pool, s.blocks[size_t(pos / bs)], pos % bs, float(vals[size_t(pos)]))) return false;
  return true;
}

}  // namespace

TEST_CASE("block_pool: allocate, share, copy-on-write, free") {
  block_pool pool(tiny_layout(4), 8);
  pool.sanity();
  CHECK(pool.n_blocks_free() == 8);
  const int32_t a = pool.create_seq();
  REQUIRE(append(pool, a, {1, 2, 3, 4, 5, 6}));
  pool.sanity();
  CHECK(pool.n_blocks_used() == 2);
  const int32_t b = pool.fork(a);
  pool.sanity();
  CHECK(pool.refcount(pool.seq(a).blocks[1]) == 2);
  CHECK(pool.blocks_needed(b, 7) == 1);  // the shared partial block is copied
  REQUIRE(append(pool, b, {70}));
  pool.sanity();
  CHECK(pool.n_cow_copies() == 1);
  CHECK(pool.seq(a).blocks[0] == pool.seq(b).blocks[0]);
  CHECK(pool.seq(a).blocks[1] != pool.seq(b).blocks[1]);
  CHECK(matches(pool, a, {1, 2, 3, 4, 5, 6}));
  CHECK(matches(pool, b, {1, 2, 3, 4, 5, 6, 70}));
  REQUIRE(append(pool, a, {7, 8, 9}));
  pool.sanity();
  CHECK(matches(pool, a, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
  pool.free_seq(a);
  pool.sanity();
  pool.free_seq(b);
  pool.sanity();
  CHECK(pool.n_blocks_free() == 8);
}

TEST_CASE("block_pool: exhaustion reports false and the evictor is asked") {
  block_pool pool(tiny_layout(4), 2);
  const int32_t a = pool.create_seq();
  REQUIRE(append(pool, a, {1, 2, 3, 4, 5, 6, 7, 8}));
  const int32_t b = pool.create_seq();
  CHECK_FALSE(pool.reserve(b, 1));
  int calls = 0;
  pool.set_evictor([&] {
    ++calls;
    if (pool.seq(a).live) { pool.free_seq(a); return true; }
    return false;
  });
  CHECK(pool.reserve(b, 5));
  CHECK(calls == 1);
  pool.sanity();
  CHECK(pool.blocks_for_budget(tiny_layout(4), 0) == 1);
  CHECK(pool.blocks_for_budget(tiny_layout(4), uint64_t(tiny_layout(4).block_bytes()) * 10 + 3) == 10);
}

TEST_CASE("block_pool: randomised against a per-sequence model") {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    const int32_t bs = 1 + int32_t(rng() % 5);
    block_pool pool(tiny_layout(bs), 6 + int32_t(rng() % 20));
    std::map<int32_t, std::vector<int32_t>> model;  // seq -> values
    std::set<int32_t> held;                          // blocks with a cache hold
    int32_t next_val = 1;
    for (int op = 0; op < 400; ++op) {
      const int kind = int(rng() % 7);
      if (kind == 0 || model.empty()) {
        model[pool.create_seq()] = {};
      } else {
        auto it = model.begin();
        std::advance(it, rng() % model.size());
        const int32_t s = it->first;
        if (kind == 1) {
          model[pool.fork(s)] = it->second;
        } else if (kind == 2 || kind == 3) {
          std::vector<int32_t> vals(1 + rng() % 7);
          for (auto& v : vals) v = next_val++;
          if (append(pool, s, vals)) {
            it->second.insert(it->second.end(), vals.begin(), vals.end());
          } else {
            pool.truncate(s, int32_t(it->second.size()));  // drop blocks reserved beyond
          }
        } else if (kind == 4) {
          const int32_t n = it->second.empty() ? 0 : int32_t(rng() % it->second.size());
          pool.truncate(s, n);
          it->second.resize(size_t(n));
        } else if (kind == 5) {
          pool.free_seq(s);
          model.erase(it);
        } else {
          // a cache hold on a used block, or drop one
          if (!held.empty() && rng() % 2) {
            auto h = held.begin();
            std::advance(h, rng() % held.size());
            pool.cache_drop(*h);
            held.erase(h);
          } else if (!pool.seq(s).blocks.empty()) {
            const int32_t b = pool.seq(s).blocks[rng() % pool.seq(s).blocks.size()];
            if (!pool.cache_held(b)) { pool.cache_hold(b); held.insert(b); }
          }
        }
      }
      pool.sanity();
      for (const auto& [s, vals] : model) REQUIRE(matches(pool, s, vals));
    }
    for (auto& [s, vals] : model) pool.free_seq(s);
    for (int32_t b : held) pool.cache_drop(b);
    pool.sanity();
    CHECK(pool.n_blocks_free() == pool.n_blocks_total());
  }
}

TEST_CASE("prefix_cache: reuse full blocks, verify tokens, LRU eviction of unreferenced only") {
  block_pool pool(tiny_layout(4), 6);
  prefix_cache cache(pool);
  pool.set_evictor([&] { return cache.evict_one(); });
  const std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const int32_t a = pool.create_seq();
  REQUIRE(append(pool, a, p));
  uint64_t h = prefix_cache::root_hash;
  for (int32_t i = 0; i < 2; ++i)
    h = cache.insert(h, std::span(p).subspan(size_t(i) * 4, 4), pool.seq(a).blocks[size_t(i)]);
  cache.sanity();
  pool.sanity();
  auto m = cache.lookup(p, int32_t(p.size()) - 1);
  CHECK(m.n_tokens == 8);
  CHECK(m.blocks == std::vector<int32_t>{pool.seq(a).blocks[0], pool.seq(a).blocks[1]});
  CHECK(m.n_partial == 0);
  // capped: the last token must be computed (the second block's first 3 rows: a partial match)
  m = cache.lookup(std::vector<int32_t>(p.begin(), p.begin() + 8), 7);
  CHECK(m.n_tokens == 7);
  CHECK(m.n_partial == 3);
  CHECK(m.hashes.size() == 1);
  // a divergent second block matches the first whole and the second's common rows
  std::vector<int32_t> q = {1, 2, 3, 4, 5, 6, 0, 8, 9};
  m = cache.lookup(q, 8);
  CHECK(m.n_tokens == 6);
  CHECK(m.n_partial == 2);
  CHECK(m.blocks.back() == pool.seq(a).blocks[1]);
  // in use: nothing evictable
  CHECK(cache.n_unreferenced() == 0);
  CHECK_FALSE(cache.evict_one());
  pool.free_seq(a);
  pool.sanity();
  CHECK(cache.n_unreferenced() == 2);
  CHECK(pool.n_blocks_free() == 4);
  // a second seq attaches the cached prefix, then allocates past the free list: eviction
  // may take only blocks it does not hold
  const int32_t b = pool.create_seq();
  m = cache.lookup(p, 9);
  pool.attach(b, m.blocks, m.n_tokens);
  pool.sanity();
  CHECK(cache.n_unreferenced() == 0);
  REQUIRE(append(pool, b, {9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}));
  CHECK_FALSE(pool.reserve(b, 8 + 16 + 1));
  pool.sanity();
  cache.sanity();
  pool.free_seq(b);
  cache.evict_all_unused();
  cache.sanity();
  pool.sanity();
  CHECK(pool.n_blocks_free() == 6);
}

namespace {
// One randomised prefix-cache run; exact: the pool never evicts, so every inserted chain
// must be found in full.
void prefix_cache_random(uint32_t seed, int32_t n_blocks, bool exact) {
  std::mt19937 rng(seed);
  const int32_t bs = 2 + int32_t(rng() % 3);
  block_pool pool(tiny_layout(bs), n_blocks);
  prefix_cache cache(pool);
  pool.set_evictor([&] { return cache.evict_one(); });
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> b(size_t(rng() % 12));
    for (auto& t : b) t = 1 + int32_t(rng() % 3);
    bases.push_back(b);
  }
  std::set<std::vector<int32_t>> inserted;  // model: block-aligned prefixes ever inserted
  std::map<int32_t, std::vector<int32_t>> live;
  for (int op = 0; op < 300; ++op) {
    if (!live.empty() && rng() % 3 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      pool.free_seq(it->first);
      live.erase(it);
    } else {
      std::vector<int32_t> toks = bases[rng() % bases.size()];
      for (int n = int(rng() % 6); n-- > 0;) toks.push_back(1 + int32_t(rng() % 3));
      if (toks.empty()) toks.push_back(1);
      const auto m = cache.lookup(toks, int32_t(toks.size()) - 1);
      // every hit row holds exactly the prompt's token (a partial last block: its first n_partial rows)
      for (int32_t pos = 0; pos < m.n_tokens; ++pos)
        REQUIRE(stamped(pool, m.blocks[size_t(pos / bs)], pos % bs, float(toks[size_t(pos)])));
      REQUIRE(m.n_tokens == int32_t(m.hashes.size()) * bs + m.n_partial);
      if (exact) {
        int32_t want = 0;
        for (int32_t n = bs; n <= int32_t(toks.size()) - 1; n += bs)
          if (inserted.count(std::vector<int32_t>(toks.begin(), toks.begin() + n))) want = n;
        // then the longest common run with any inserted next block of that chain
        int32_t want_partial = 0;
        const int32_t lim = std::min(bs, int32_t(toks.size()) - 1 - want);
        for (const auto& ins : inserted) {
          if (int32_t(ins.size()) != want + bs || !std::equal(toks.begin(), toks.begin() + want, ins.begin())) continue;
          int32_t n = 0;
          while (n < lim && ins[size_t(want + n)] == toks[size_t(want + n)]) ++n;
          want_partial = std::max(want_partial, n);
        }
        REQUIRE(m.n_tokens - m.n_partial == want);
        REQUIRE(m.n_partial == want_partial);
      }
      const int32_t s = pool.create_seq();
      pool.attach(s, m.blocks, m.n_tokens);
      pool.sanity();
      std::vector<int32_t> rest(toks.begin() + m.n_tokens, toks.end());
      if (!append(pool, s, rest)) {
        pool.free_seq(s);
      } else {
        uint64_t h = prefix_cache::root_hash;
        for (int32_t i = 0; i < int32_t(toks.size()) / bs; ++i) {
          h = cache.insert(h, std::span(toks).subspan(size_t(i * bs), size_t(bs)), pool.seq(s).blocks[size_t(i)]);
          inserted.insert(std::vector<int32_t>(toks.begin(), toks.begin() + (i + 1) * bs));
        }
        live[s] = toks;
      }
    }
    pool.sanity();
    cache.sanity();
    for (const auto& [s, toks] : live) REQUIRE(matches(pool, s, toks));  // eviction never hit a used block
  }
  if (exact) CHECK(cache.n_evictions() == 0);
}
}  // namespace

TEST_CASE("prefix_cache: randomised against a set-of-prefixes model") {
  for (uint32_t seed = 1; seed <= 10; ++seed) prefix_cache_random(seed, 4096, true);
  for (uint32_t seed = 1; seed <= 30; ++seed) prefix_cache_random(seed, 12, false);
}
