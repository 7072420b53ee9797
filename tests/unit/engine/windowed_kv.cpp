// Windowed KV (kv_layout::window): sliding-window layers hold pages only for the blocks their
// window reaches. The block pool against a trivially correct model (every position's stamp,
// full layers everywhere, windowed layers inside each sequence's window), with sanity() after
// every mutation; the page count a long sequence holds; prefix hits and truncation stop where
// the window's pages are gone; the spill tier writes and restores the short blocks.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>

#include <unistd.h>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv/spill.h"
#include "kv_stamp.h"

using namespace agentq;
using test::append;
using test::stamp;
namespace fs = std::filesystem;

namespace {

// 4 layers, layers 0-2 windowed (window 10), layer 3 full: Gemma 3's shape in miniature.
kv_layout windowed_layout(int32_t block_size = 4, int32_t window = 10) {
  kv_layout l{4, 1, 2, block_size};
  l.window = window;
  for (int il = 0; il < 3; ++il) l.layer_windowed.set(size_t(il));
  return l;
}

bool is_windowed(const block_pool& pool, int32_t il) { return pool.layout().layer_windowed[size_t(il)]; }

// Full layers hold every position; windowed layers every position from the window's first
// block on (what attention may read for the next token).
bool matches(const block_pool& pool, int32_t seq, const std::vector<int32_t>& vals) {
  const auto& s = pool.seq(seq);
  if (s.n_tokens != int32_t(vals.size())) return false;
  const int32_t bs = pool.block_size();
  const int32_t first = pool.layout().window_block(s.n_tokens) * bs;
  for (int32_t pos = 0; pos < s.n_tokens; ++pos) {
    const int32_t b = s.blocks[size_t(pos / bs)], row = pos % bs;
    for (int32_t l = 0; l < pool.layout().n_layer; ++l) {
      if (is_windowed(pool, l) && pos < first) continue;
      if (!test::stamped_in(pool, l, b, row, float(vals[size_t(pos)]))) return false;
    }
  }
  return true;
}
std::vector<int32_t> iota_from(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
  return v;
}

}  // namespace

TEST_CASE("windowed kv: a long sequence holds its windowed layers for the window only") {
  const kv_layout l = windowed_layout();
  block_pool pool(l, 40);  // 160 pages; block ids for 160 full-layer-only blocks
  CHECK(pool.windowed());
  CHECK(pool.n_blocks_total() == 40);
  CHECK(pool.n_block_ids() == 160);
  const int32_t s = pool.create_seq();
  std::vector<int32_t> vals;
  for (int32_t i = 0; i < 300; ++i) {
    vals.push_back(1000 + i);
    REQUIRE(append(pool, s, {vals.back()}));
    pool.sanity();
    const int32_t n = i + 1, nb = pool.blocks_for_tokens(n), wf = l.window_block(n);
    CHECK(pool.n_pages_used() == int64_t(nb) * 1 + int64_t(nb - wf) * 3);
    CHECK(l.seq_bytes(n) == pool.n_pages_used() * 2 * l.block_elem_bytes());
  }
  CHECK(matches(pool, s, vals));
  // 300 tokens: 75 blocks whole would be 300 pages, more than the pool has; windowed, 75 + 3 * 3.
  CHECK(pool.n_pages_used() == 75 + 3 * 3);
  CHECK(pool.fits(300));
  CHECK_FALSE(pool.fits(1000));
  // A copy-on-write fork keeps both sequences' windows intact.
  const int32_t f = pool.fork(s);
  pool.sanity();
  auto fv = vals;
  for (int32_t i = 0; i < 9; ++i) {
    fv.push_back(-i);
    REQUIRE(append(pool, f, {fv.back()}));
    pool.sanity();
  }
  CHECK(matches(pool, s, vals));
  CHECK(matches(pool, f, fv));
  pool.free_seq(f);
  pool.free_seq(s);
  pool.sanity();
  CHECK(pool.n_pages_used() == 0);
}

TEST_CASE("windowed kv: truncation and prefix hits stop where the window's pages are gone") {
  const kv_layout l = windowed_layout();
  block_pool pool(l, 64);
  prefix_cache cache(pool);
  pool.set_evictor([&] { return cache.evict_one(); });
  const int32_t s = pool.create_seq();
  std::vector<token_id> toks;
  for (int32_t i = 0; i < 60; ++i) toks.push_back(token_id(7 + i));
  // one block at a time, each registered in the cache before the sequence moves on (as the
  // scheduler does: then the windowed pages it leaves behind linger in the cache)
  uint64_t parent = prefix_cache::root_hash;
  for (int32_t i = 0; i < 15; ++i) {
    REQUIRE(pool.reserve(s, (i + 1) * 4));
    for (int32_t r = 0; r < 4; ++r) stamp(pool, pool.seq(s).blocks[size_t(i)], r, float(toks[size_t(i * 4 + r)]));
    parent = cache.insert(parent, std::span(toks).subspan(size_t(i) * 4, 4), pool.seq(s).blocks[size_t(i)]);
    pool.set_n_tokens(s, (i + 1) * 4);
    pool.sanity();
  }
  pool.sanity();
  cache.sanity();
  // A lookup of the whole chain is usable in full: its window's blocks hold every page.
  CHECK(cache.lookup(toks, 60).n_tokens == 60);
  // Memory to spare: the cache keeps the windowed pages of its blocks past the window
  // (lingering), so a shorter prefix is usable too.
  CHECK(pool.n_pages_lingering() == 12 * 3);
  CHECK(cache.lookup(toks, 40).n_tokens == 40);
  // Pressure takes lingering pages back, oldest first, before evicting whole blocks: 49 blocks
  // fill the free pages, 9 more take the 36 lingering ones.
  const int32_t g = pool.create_seq();
  REQUIRE(pool.reserve(g, 49 * 4));  // whole blocks (all in g's window): every free page
  pool.sanity();
  CHECK(pool.n_pages_lingering() == 12 * 3);
  REQUIRE(pool.reserve(g, 58 * 4));
  pool.sanity();
  CHECK(pool.n_pages_lingering() == 0);
  CHECK(pool.n_lingering_released() == 12);
  CHECK(cache.n_cached() == 15);  // no whole block was evicted
  // Now a shorter prefix reaches blocks whose windowed pages are gone: nothing usable
  // (n = 40 needs blocks 7.. whole; only blocks 12.. are).
  CHECK(cache.lookup(toks, 40).n_tokens == 0);
  CHECK(cache.lookup(toks, 60).n_tokens == 60);
  pool.free_seq(g);
  pool.sanity();
  // Truncating to 58 keeps 58 (its window, from block 12, is whole); to 30 falls back to 0.
  const int32_t f = pool.fork(s);
  CHECK(pool.truncate(f, 58) == 58);
  pool.sanity();
  CHECK(pool.truncate(f, 30) == 0);
  pool.sanity();
  pool.free_seq(f);
  // The sequence ends: its window's blocks keep their pages (lingering) while the cache holds
  // them, so the next turn's lookup gets the whole chain and attaches it.
  pool.free_seq(s);
  pool.sanity();
  const auto m = cache.lookup(toks, 60);
  CHECK(m.n_tokens == 60);
  const int32_t t = pool.create_seq();
  pool.attach(t, m.blocks, m.n_tokens);
  pool.sanity();
  std::vector<int32_t> vals(toks.begin(), toks.end());
  CHECK(matches(pool, t, vals));
  pool.free_seq(t);
  cache.evict_all_unused();
  pool.sanity();
  CHECK(pool.n_pages_used() == 0);
}

TEST_CASE("windowed kv: randomised sequences, forks, truncation and cache against a model") {
  std::mt19937 rng(7);
  const kv_layout l = windowed_layout(4, 9);
  block_pool pool(l, 48);
  prefix_cache cache(pool);
  pool.set_evictor([&] { return cache.evict_one(); });
  std::map<int32_t, std::vector<int32_t>> model;  // seq -> values
  int32_t next_val = 1;
  for (int step = 0; step < 3000; ++step) {
    const int op = int(rng() % 10);
    if (model.empty() || op == 0) {
      model[pool.create_seq()] = {};
    } else {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      const int32_t s = it->first;
      auto& vals = it->second;
      if (op <= 5) {
        std::vector<int32_t> add(size_t(1 + rng() % 6));
        for (auto& v : add) v = next_val++;
        if (append(pool, s, add)) vals.insert(vals.end(), add.begin(), add.end());
        else {
          pool.truncate(s, int32_t(vals.size()));  // drop the partial reservation
        }
      } else if (op == 6) {
        const int32_t want = int32_t(rng() % (vals.size() + 1));
        const int32_t got = pool.truncate(s, want);
        CHECK(got <= want);
        vals.resize(size_t(got));
      } else if (op == 7 && model.size() < 6) {
        const int32_t f = pool.fork(s);
        model[f] = vals;
      } else if (op == 8) {
        // register the full blocks in the cache (values as tokens)
        uint64_t parent = prefix_cache::root_hash;
        const int32_t nf = int32_t(vals.size()) / 4;
        for (int32_t i = 0; i < nf; ++i) {
          std::vector<token_id> blk(vals.begin() + i * 4, vals.begin() + i * 4 + 4);
          parent = cache.insert(parent, blk, pool.seq(s).blocks[size_t(i)]);
        }
      } else {
        pool.free_seq(s);
        model.erase(it);
      }
    }
    pool.sanity();
    cache.sanity();
    for (const auto& [s, vals] : model) REQUIRE(matches(pool, s, vals));
  }
}

TEST_CASE("windowed kv: the spill tier writes the short blocks and restores them") {
  const kv_layout l = windowed_layout();
  const fs::path dir = fs::temp_directory_path() / ("agentq_windowed_spill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  block_pool pool(l, 64);
  spill_store spill(dir.string(), "digest", l);
  const int32_t s = pool.create_seq();
  std::vector<int32_t> vals = iota_from(500, 77);
  REQUIRE(append(pool, s, vals));
  std::vector<token_id> toks(vals.begin(), vals.end());
  std::string path;
  REQUIRE(spill.write(pool, s, toks, &path));
  // the file holds the sequence's bytes (full layers whole, windowed layers the window) only
  CHECK(int64_t(fs::file_size(path)) == spill.file_bytes(77));
  CHECK(spill.file_bytes(77) < int64_t(4096) + int64_t(pool.blocks_for_tokens(77)) * l.block_bytes());
  pool.free_seq(s);
  pool.sanity();
  CHECK(pool.n_pages_used() == 0);
  int32_t n_common = 0;
  const int32_t e = spill.find(toks, &n_common);
  REQUIRE(e >= 0);
  CHECK(n_common == 77);
  const int32_t r = pool.create_seq();
  REQUIRE(spill.restore(e, 77, pool, r));
  pool.sanity();
  CHECK(matches(pool, r, vals));
  CHECK(pool.n_pages_used() == int64_t(20) + 3 * (20 - l.window_block(77)));
  pool.free_seq(r);
  pool.sanity();
  fs::remove_all(dir);
}
