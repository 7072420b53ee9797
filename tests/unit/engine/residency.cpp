// Residency policy and the spill tier: pin / spill / drop decisions, checksummed files
// restored bit-exactly, corrupted files detected and never used, index rebuilt on restart.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kv/residency.h"
#include "kv/prefix_cache.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {
kv_layout layout() { return {2, 2, 4, 4}; }
fs::path fresh_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("agentq-test-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}
// A seq of n tokens whose K/V rows are filled with a pattern derived from (token, pos, layer).
int32_t make_seq(block_pool& pool, const std::vector<token_id>& toks) {
  const int32_t s = pool.create_seq();
  REQUIRE(pool.reserve(s, int32_t(toks.size())));
  const auto& L = pool.layout();
  for (int32_t pos = 0; pos < int32_t(toks.size()); ++pos)
    for (int32_t l = 0; l < L.n_layer; ++l)
      for (int32_t j = 0; j < L.row(); ++j) {
        const int32_t b = pool.seq(s).blocks[size_t(pos / L.block_size)];
        pool.store().k(l, b)[(pos % L.block_size) * L.row() + j] = float(toks[size_t(pos)] * 1000 + pos * 10 + l) + j * 0.5f;
        pool.store().v(l, b)[(pos % L.block_size) * L.row() + j] = -float(toks[size_t(pos)] * 1000 + pos * 10 + l) - j * 0.25f;
      }
  pool.set_n_tokens(s, int32_t(toks.size()));
  return s;
}
bool same_rows(const block_pool& pool, int32_t a, int32_t b, int32_t n) {
  const auto& L = pool.layout();
  for (int32_t pos = 0; pos < n; ++pos)
    for (int32_t l = 0; l < L.n_layer; ++l)
      for (int32_t j = 0; j < L.row(); ++j) {
        const int32_t ba = pool.seq(a).blocks[size_t(pos / L.block_size)], bb = pool.seq(b).blocks[size_t(pos / L.block_size)];
        const size_t o = size_t((pos % L.block_size) * L.row() + j);
        if (pool.store().k(l, ba)[o] != pool.store().k(l, bb)[o] || pool.store().v(l, ba)[o] != pool.store().v(l, bb)[o]) return false;
      }
  return true;
}
std::vector<token_id> toks(int32_t n) {
  std::vector<token_id> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(token_id(7 + i % 13));
  return v;
}
}  // namespace

TEST_CASE("residency: pin short waits, spill long ones, drop short sequences") {
  const auto dir = fresh_dir("policy");
  block_pool pool(layout(), 64);
  spill_store spill(dir.string(), "digest-a", layout());
  residency_config cfg;
  cfg.spill_min_tokens = 8;
  residency res(pool, &spill, cfg);
  const auto t = toks(10);
  res.keep({1, make_seq(pool, t), t, {}, resident_state::idle, 0}, 0.0);
  res.sanity();
  pool.sanity();
  CHECK(res.park(1, 5.0, 0.0) == park_action::pinned);
  CHECK(res.has(1));
  CHECK(res.n_blocks_parked() == 3);
  res.expire(5.0);
  CHECK(res.has(1));
  res.expire(12.0);  // 5 * 2 + 1 s elapsed: spilled (10 tokens >= 8)
  CHECK_FALSE(res.has(1));
  CHECK(res.counters().n_spills == 1);
  CHECK(spill.entries().size() == 1);
  CHECK(pool.n_blocks_free() == 64);
  pool.sanity();
  const auto t2 = toks(5);
  res.keep({2, make_seq(pool, t2), t2, {}, resident_state::idle, 0}, 20.0);
  CHECK(res.park(2, 1000.0, 20.0) == park_action::dropped);  // too short to be worth a file
  CHECK(res.counters().n_drops == 1);
  // memory pressure: the evictor reclaims idle first, then pinned with the soonest expiry
  res.keep({3, make_seq(pool, t), t, {}, resident_state::idle, 0}, 30.0);
  res.keep({4, make_seq(pool, t), t, {}, resident_state::idle, 0}, 30.0);
  CHECK(res.park(3, 1.0, 30.0) == park_action::pinned);
  CHECK(res.reclaim_one());
  CHECK(res.has(3));
  CHECK_FALSE(res.has(4));
  CHECK(res.reclaim_one());
  CHECK_FALSE(res.reclaim_one());
  pool.sanity();
  res.sanity();
  fs::remove_all(dir);
}

TEST_CASE("spill: restore is bit-exact, survives a restart, corrupted files are never used") {
  const auto dir = fresh_dir("spill");
  const auto t = toks(23);
  {
    block_pool pool(layout(), 32);
    spill_store spill(dir.string(), "digest-a", layout());
    residency_config cfg;
    cfg.spill_min_tokens = 8;
    residency res(pool, &spill, cfg);
    const int32_t src = make_seq(pool, t);
    const int32_t keep = pool.fork(src);  // reference copy of the rows
    res.keep({9, src, t, {}, resident_state::idle, 0}, 0.0);
    CHECK(res.park(9, 3600.0, 0.0) == park_action::spilled);
    auto longer = t;
    longer.push_back(99);
    const int32_t dst = pool.create_seq();
    CHECK(res.restore(longer, int32_t(longer.size()) - 1, 0, dst) == 23);
    CHECK(res.counters().n_restores == 1);
    CHECK(same_rows(pool, keep, dst, 23));
    pool.sanity();
    // spill again for the restart check
    res.keep({9, dst, t, {}, resident_state::idle, 0}, 0.0);
    CHECK(res.park(9, 3600.0, 0.0) == park_action::spilled);
    pool.free_seq(keep);
  }
  {
    // restart: the index is rebuilt from the directory
    block_pool pool(layout(), 32);
    spill_store spill(dir.string(), "digest-a", layout());
    REQUIRE(spill.entries().size() == 1);
    CHECK(spill.entries()[0].tokens == t);
    spill_store other(dir.string(), "digest-b", layout());  // another model's files are invisible
    CHECK(other.entries().empty());
    residency res(pool, &spill, residency_config{});
    const int32_t ref = make_seq(pool, t);
    const int32_t dst = pool.create_seq();
    // a restore of part of the file: the 17 tokens the prompt shares
    auto prompt = std::vector<token_id>(t.begin(), t.begin() + 17);
    prompt.push_back(1000);
    CHECK(res.restore(prompt, int32_t(prompt.size()) - 1, 4, dst) == 17);
    CHECK(pool.seq(dst).n_tokens == 17);
    CHECK(same_rows(pool, ref, dst, 17));
    CHECK(spill.entries().empty());
    // write once more, then corrupt one payload byte
    std::string path;
    REQUIRE(spill.write(pool, ref, t, &path));
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-40, std::ios::end);
      char c = 0;
      f.read(&c, 1);
      f.seekp(-40, std::ios::end);
      c = char(c ^ 0x10);
      f.write(&c, 1);
    }
    const int32_t dst2 = pool.create_seq();
    CHECK(res.restore(t, 22, 0, dst2) == 0);  // detected: caller recomputes
    CHECK(spill.n_corrupt() == 1);
    CHECK(res.counters().n_restore_failures == 1);
    CHECK(pool.seq(dst2).n_tokens == 0);
    CHECK_FALSE(fs::exists(path));  // never used again
    // a truncated file is rejected at restore too
    REQUIRE(spill.write(pool, ref, t, &path));
    fs::resize_file(path, fs::file_size(path) - 3);
    spill_store reopened(dir.string(), "digest-a", layout());
    residency res2(pool, &reopened, residency_config{});
    CHECK(res2.restore(t, 22, 0, dst2) == 0);
    CHECK(reopened.n_corrupt() == 1);
    pool.sanity();
  }
  fs::remove_all(dir);
}
