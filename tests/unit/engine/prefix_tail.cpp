// Prefix sharing below block granularity (engine/kv/prefix_tail.cpp): tails and partial
// matches in the cache (stamped rows, sanity() after every mutation, a randomised run), and
// the engine on the real tiny model: a shared prefix shorter than a block, or ending mid-block,
// is computed once, and greedy outputs are token-identical with and without the sharing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "engine_impl.h"
#include "golden.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv_stamp.h"

using namespace agentq;
using test::append;

namespace {

kv_layout tiny_layout(int32_t block_size) {
  return {2, 1, 2, block_size};
}

bool stamped(const block_pool& pool, int32_t block, int32_t row, float v) {
  for (int32_t l = 0; l < pool.layout().n_layer; ++l)
    if (!test::stamped_in(pool, l, block, row, v)) return false;
  return true;
}
bool rows_hold(const block_pool& pool, const prefix_match& m, const std::vector<int32_t>& toks) {
  const int32_t bs = pool.block_size();
  for (int32_t pos = 0; pos < m.n_tokens; ++pos)
    if (!stamped(pool, m.blocks[size_t(pos / bs)], pos % bs, float(toks[size_t(pos)]))) return false;
  return true;
}
// A seq holding toks; its full blocks registered in the cache; returns the seq and the last chain hash.
std::pair<int32_t, uint64_t> make(block_pool& pool, prefix_cache& cache, const std::vector<int32_t>& toks) {
  const int32_t s = pool.create_seq();
  REQUIRE(append(pool, s, toks));
  uint64_t h = prefix_cache::root_hash;
  const int32_t bs = pool.block_size();
  for (int32_t i = 0; i < int32_t(toks.size()) / bs; ++i)
    h = cache.insert(h, std::span(toks).subspan(size_t(i * bs), size_t(bs)), pool.seq(s).blocks[size_t(i)]);
  return {s, h};
}
// Register seq s's partly filled last block (toks: its tokens) as a tail after parent.
bool tail_of(block_pool& pool, prefix_cache& cache, int32_t s, uint64_t parent, const std::vector<int32_t>& toks) {
  const int32_t bs = pool.block_size(), n_full = int32_t(toks.size()) / bs;
  return cache.insert_tail(parent, std::span(toks).subspan(size_t(n_full * bs)), pool.seq(s).blocks[size_t(n_full)]);
}

}  // namespace

TEST_CASE("prefix_cache: a tail is shared by its common rows; extended and least recently used tails go") {
  block_pool pool(tiny_layout(4), 16);
  prefix_cache cache(pool);
  pool.set_evictor([&] { return cache.evict_one(); });
  const std::vector<int32_t> a_toks = {1, 2, 3, 4, 5, 6};
  auto [a, h0] = make(pool, cache, a_toks);
  CHECK(tail_of(pool, cache, a, h0, a_toks));
  pool.free_seq(a);
  cache.sanity();
  pool.sanity();
  CHECK(cache.n_tails() == 1);
  CHECK(cache.n_unreferenced() == 2);
  // a prompt sharing the tail's two rows, and one sharing only its first
  std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7};
  auto m = cache.lookup(p, 6);
  CHECK(m.n_tokens == 6);
  CHECK(m.n_partial == 2);
  CHECK(rows_hold(pool, m, p));
  CHECK(cache.lookup(std::vector<int32_t>{1, 2, 3, 4, 5, 9}, 5).n_tokens == 5);
  // before any full block: the rows of a cached full block that match
  m = cache.lookup(std::vector<int32_t>{1, 2, 9}, 2);
  CHECK(m.n_tokens == 2);
  CHECK(m.hashes.empty());
  // a sequence attaching the tail copies its rows before its first write; the tail is intact
  m = cache.lookup(p, 6);
  const int32_t b = pool.create_seq();
  pool.attach(b, m.blocks, m.n_tokens);
  const int64_t cow0 = pool.n_cow_copies();
  REQUIRE(append(pool, b, {7}));
  CHECK(pool.n_cow_copies() == cow0 + 1);
  CHECK(pool.seq(b).blocks[1] != m.blocks[1]);
  CHECK(rows_hold(pool, m, p));
  for (int32_t pos = 0; pos < 7; ++pos)
    CHECK(stamped(pool, pool.seq(b).blocks[size_t(pos / 4)], pos % 4, float(p[size_t(pos)])));
  pool.sanity();
  cache.sanity();
  // b's own tail {5, 6, 7} extends the cached {5, 6}: that one goes
  CHECK(tail_of(pool, cache, b, h0, p));
  CHECK(cache.n_tails() == 1);
  CHECK(cache.lookup(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, 7).n_tokens == 7);
  // nothing new: a tail another already covers
  const auto [c, hc] = make(pool, cache, {1, 2, 3, 4, 5});
  CHECK_FALSE(tail_of(pool, cache, c, hc, {1, 2, 3, 4, 5}));
  pool.free_seq(b);
  pool.free_seq(c);
  // at most k_max_tails per parent: the least recently used is given back
  std::vector<int32_t> seqs;
  for (int32_t k = 0; k < prefix_cache::k_max_tails + 2; ++k) {
    const std::vector<int32_t> t = {1, 2, 3, 4, 20 + k, 40 + k};
    const auto [s, h] = make(pool, cache, t);
    CHECK(tail_of(pool, cache, s, h, t));
    pool.free_seq(s);
    cache.sanity();
    pool.sanity();
    CHECK(cache.n_tails() <= prefix_cache::k_max_tails);
  }
  CHECK(cache.lookup(std::vector<int32_t>{1, 2, 3, 4, 20, 40, 0}, 6).n_partial == 0);  // the oldest went
  CHECK(cache.lookup(std::vector<int32_t>{1, 2, 3, 4, 25, 45, 0}, 6).n_partial == 2);
  // the owner of a tail takes it back before appending (no copy)
  const std::vector<int32_t> o_toks = {7, 7, 7};
  const auto [o, ho] = make(pool, cache, o_toks);
  CHECK(tail_of(pool, cache, o, ho, o_toks));
  const int32_t blk = pool.seq(o).blocks[0];
  CHECK_FALSE(cache.take_tail(m.blocks[0]));  // a full block
  CHECK(cache.take_tail(blk));
  const int64_t cow1 = pool.n_cow_copies();
  REQUIRE(append(pool, o, {8}));
  CHECK(pool.n_cow_copies() == cow1);
  CHECK(pool.seq(o).blocks[0] == blk);
  pool.free_seq(o);
  cache.evict_all_unused();
  cache.sanity();
  pool.sanity();
  CHECK(pool.n_blocks_free() == 16);
}

TEST_CASE("prefix_cache: a parent with more children than a lookup scans still finds its tails") {
  block_pool pool(tiny_layout(4), 400);
  prefix_cache cache(pool);
  const std::vector<int32_t> t = {1, 2};
  const auto [s, h] = make(pool, cache, t);
  CHECK(tail_of(pool, cache, s, h, t));  // the oldest child of root
  for (int32_t k = 0; k < 300; ++k) {    // then 300 distinct first blocks, all newer
    const auto [f, hf] = make(pool, cache, {100 + k, 7, 7, 7});
    (void)hf;
    pool.free_seq(f);
  }
  pool.free_seq(s);
  cache.sanity();
  const auto m = cache.lookup(std::vector<int32_t>{1, 2, 3}, 2);
  CHECK(m.n_tokens == 2);
  CHECK(rows_hold(pool, m, {1, 2, 3}));
  CHECK(cache.lookup(std::vector<int32_t>{399, 7, 9}, 2).n_tokens == 2);  // the newest full block, in part
  CHECK(cache.lookup(std::vector<int32_t>{100, 7, 9}, 2).n_tokens == 0);  // the oldest: past the scan's bound
  pool.sanity();
}

TEST_CASE("prefix_cache: tails on a windowed pool are not kept") {
  kv_layout l = tiny_layout(4);
  l.window = 8;
  l.layer_windowed.set(0);
  block_pool pool(l, 16);
  prefix_cache cache(pool);
  const std::vector<int32_t> t = {1, 2};
  const auto [s, h] = make(pool, cache, t);
  CHECK_FALSE(tail_of(pool, cache, s, h, t));
  pool.free_seq(s);
  CHECK(cache.lookup(std::vector<int32_t>{1, 2, 3}, 2).n_tokens == 0);
  cache.sanity();
  pool.sanity();
}

TEST_CASE("prefix_cache: randomised with tails — every hit row holds the prompt's token") {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 2 + int32_t(rng() % 4);
    block_pool pool(tiny_layout(bs), seed % 2 ? 4096 : 10);
    prefix_cache cache(pool);
    pool.set_evictor([&] { return cache.evict_one(); });
    std::vector<std::vector<int32_t>> bases;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> b(size_t(rng() % 9));
      for (auto& t : b) t = 1 + int32_t(rng() % 3);
      bases.push_back(b);
    }
    std::map<int32_t, std::pair<std::vector<int32_t>, uint64_t>> live;  // seq -> tokens, last chain hash
    for (int op = 0; op < 300; ++op) {
      if (!live.empty() && rng() % 3 == 0) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const auto& [toks, h] = it->second;
        if (int32_t(toks.size()) % bs != 0 && rng() % 4 != 0) tail_of(pool, cache, it->first, h, toks);
        pool.free_seq(it->first);
        live.erase(it);
      } else {
        std::vector<int32_t> toks = bases[rng() % bases.size()];
        for (int n = int(rng() % 5); n-- > 0;) toks.push_back(1 + int32_t(rng() % 3));
        if (toks.empty()) toks.push_back(1);
        const auto m = cache.lookup(toks, int32_t(toks.size()) - 1);
        REQUIRE(m.n_tokens == int32_t(m.hashes.size()) * bs + m.n_partial);
        REQUIRE(m.n_partial < bs + 1);
        REQUIRE(rows_hold(pool, m, toks));
        const int32_t s = pool.create_seq();
        pool.attach(s, m.blocks, m.n_tokens);
        pool.sanity();
        std::vector<int32_t> rest(toks.begin() + m.n_tokens, toks.end());
        if (!append(pool, s, rest)) {
          pool.free_seq(s);
        } else {
          uint64_t h = prefix_cache::root_hash;
          for (int32_t i = 0; i < int32_t(toks.size()) / bs; ++i)
            h = cache.insert(h, std::span(toks).subspan(size_t(i * bs), size_t(bs)), pool.seq(s).blocks[size_t(i)]);
          live[s] = {toks, h};
        }
      }
      pool.sanity();
      cache.sanity();
      for (const auto& [s, th] : live) {  // sharing and eviction never touched a used row
        const auto& toks = th.first;
        for (int32_t pos = 0; pos < int32_t(toks.size()); ++pos)
          REQUIRE(stamped(pool, pool.seq(s).blocks[size_t(pos / bs)], pos % bs, float(toks[size_t(pos)])));
      }
    }
    CHECK(cache.n_partial_hits() > 0);
  }
}

namespace {

// n prompts: a shared head of n_shared tokens, then a distinct tail per prompt (the shape of a
// Batch file's lines: one system prompt, one user message each).
std::vector<std::vector<token_id>> shared_head_prompts(int32_t n_shared, int32_t n) {
  const auto g = test::load_golden();
  REQUIRE(!g.empty());
  std::vector<token_id> head = {1};
  for (int32_t i = 1; i < n_shared; ++i) {
    const auto& ids = g[size_t(i) % g.size()].prompt_ids;
    head.push_back(ids[size_t(i) % ids.size()]);
  }
  std::vector<std::vector<token_id>> out;
  for (int32_t k = 0; k < n; ++k) {
    auto p = head;
    for (int32_t j = 0; j < 12 + k % 5; ++j) p.push_back(token_id(300 + (k * 37 + j * 11) % 180));
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("engine: a shared head shorter than a block, or ending mid-block, is computed once; outputs identical") {
  for (const int32_t n_shared : {37, 100}) {
    CAPTURE(n_shared);
    const auto prompts = shared_head_prompts(n_shared, 6);
    auto base_cfg = test::tiny_config();
    base_cfg.prefix_reuse = false;
    auto base = test::load_as<engine_impl>(base_cfg);
    auto e = test::load_as<engine_impl>(test::tiny_config());
    // one after another (each line's KV freed before the next is admitted), jobs with keys as a
    // worker submits them (the turn's KV resident until release)
    for (size_t k = 0; k < prompts.size(); ++k) {
      // NOTE: 8 tokens keep each line's K/V inside its last partly filled block (a tail)
      const auto want = test::run_one(*base, test::greedy(prompts[k], 8));
      const auto got = test::run_one(*e, test::greedy(prompts[k], 8, 100 + k));
      CHECK(got.output_ids == want.output_ids);
      CHECK(got.usage.n_tokens_prompt == int32_t(prompts[k].size()));
      if (k == 0)
        CHECK(got.usage.n_tokens_cached == 0);
      else
        CHECK(got.usage.n_tokens_cached == n_shared);  // the head, whole blocks or not
      CHECK(got.usage.n_tokens_cached + got.usage.n_tokens_computed == got.usage.n_tokens_prompt);
      e->release(100 + k);
      e->step();
      e->sanity();
    }
    CHECK(e->cache().n_partial_hits() >= int64_t(prompts.size()) - 1);
    // batched: all at once, after the head is cached, outputs still identical
    std::vector<token_request> reqs;
    for (size_t k = 0; k < prompts.size(); ++k) reqs.push_back(test::greedy(prompts[k], 8, 200 + k));
    const auto rs = test::run_all(*e, reqs);
    for (size_t k = 0; k < prompts.size(); ++k) {
      CHECK(rs[k].output_ids == test::run_one(*base, test::greedy(prompts[k], 8)).output_ids);
      CHECK(rs[k].usage.n_tokens_cached >= n_shared);
    }
  }
}

TEST_CASE("engine: a job's next turn appends to its own last block in place (its tail taken back)") {
  auto e = test::load_as<engine_impl>(test::tiny_config());
  const auto prompts = shared_head_prompts(20, 1);
  const auto t1 = test::run_one(*e, test::greedy(prompts[0], 10, 7));
  CHECK(e->cache().n_tails() == 1);  // turn 1's last block, shared at once
  auto p2 = prompts[0];
  p2.insert(p2.end(), t1.output_ids.begin(), t1.output_ids.end());
  p2.push_back(13);
  const int64_t cow0 = e->pool().n_cow_copies();
  const auto t2 = test::run_one(*e, test::greedy(p2, 10, 7));
  CHECK(t2.usage.n_tokens_cached == int32_t(p2.size()) - 2);  // resident: all but turn 1's last token + the new one
  CHECK(e->pool().n_cow_copies() == cow0);
  e->sanity();
}

TEST_CASE("engine: a spilled job's tail leaves memory with it; its next turn restores from disk, outputs identical") {
  const auto dir = std::filesystem::temp_directory_path() / ("agentq-tail-spill-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto cfg = test::tiny_config();
  cfg.spill_dir = dir.string();
  auto e = test::load_as<engine_impl>(cfg);
  const auto p1 = shared_head_prompts(90, 1)[0];
  const auto t1 = test::run_one(*e, test::greedy(p1, 20, 7));
  CHECK(e->cache().n_tails() == 1);  // shared when the turn ended
  e->park(7, 3600.0);                // a long wait: spilled, the sequence freed
  e->step();
  CHECK(e->stats().n_spills == 1);
  CHECK(e->cache().n_tails() == 0);  // its tail went with it
  auto p2 = p1;
  p2.insert(p2.end(), t1.output_ids.begin(), t1.output_ids.end());
  p2.insert(p2.end(), {13, 350, 351, 352});
  const auto t2 = test::run_one(*e, test::greedy(p2, 8, 7));
  CHECK(e->stats().n_restores == 1);
  CHECK(t2.usage.n_tokens_cached == int32_t(p1.size() + t1.output_ids.size()) - 1);
  auto base_cfg = test::tiny_config();
  base_cfg.prefix_reuse = false;
  auto base = test::load_as<engine_impl>(base_cfg);
  CHECK(t2.output_ids == test::run_one(*base, test::greedy(p2, 8)).output_ids);
  e->release(7);
  e->step();
  e->sanity();
  std::filesystem::remove_all(dir);
}
