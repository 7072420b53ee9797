// KV across restarts (issue 31): the shutdown spill keeps to its time bound and its order, the
// spill budget evicts the files whose jobs resume last, early spills keep the KV pinned, and
// the start-up sweep removes dead writers' temp files and torn files (counted).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "kv/residency.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("agentq-test-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}
std::vector<token_id> toks(int32_t n, int32_t salt) {
  std::vector<token_id> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(token_id(3 + (i * 7 + salt) % 31));
  return v;
}
// A live seq of n tokens (K/V content does not matter here: restore is checked bit-exact elsewhere).
int32_t make_seq(block_pool& pool, int32_t n) {
  const int32_t s = pool.create_seq();
  REQUIRE(pool.reserve(s, n));
  pool.set_n_tokens(s, n);
  return s;
}
resident_seq resident(block_pool& pool, uint64_t job, int32_t n) {
  resident_seq r;
  r.job_key = job;
  r.tokens = toks(n, int32_t(job));
  r.seq_idx = make_seq(pool, n);
  return r;
}
int count_files(const fs::path& dir, const std::string& needle) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(needle) != std::string::npos) ++n;
  return n;
}
}  // namespace

TEST_CASE("shutdown spill: respects its time bound; what does not fit is dropped and counted") {
  const auto dir = fresh_dir("shutdown");
  // 2 MiB per 64-token sequence: big enough that 24 of them take longer than the bound
  const kv_layout lay{8, 8, 64, 16};
  constexpr int32_t k_seqs = 24, k_tokens = 64;
  block_pool pool(lay, k_seqs * 4 + 8);
  spill_store spill(dir.string(), "digest", lay);
  residency_config cfg;
  cfg.spill_min_tokens = 16;
  residency res(pool, &spill, cfg);
  for (int32_t j = 1; j <= k_seqs; ++j) res.keep(resident(pool, uint64_t(j), k_tokens), 0.0);
  res.keep(resident(pool, 999, 8), 0.0);  // too short to be worth a file

  SUBCASE("no time: nothing written, everything counted") {
    const auto r = res.shutdown_spill(0.0);
    CHECK(r.n_seqs == 0);
    CHECK(r.n_dropped == k_seqs);
    CHECK(r.n_tokens_dropped == int64_t(k_seqs) * k_tokens);
    CHECK(r.n_short == 1);
    CHECK(spill.entries().empty());
  }
  SUBCASE("a short bound: stops in time, leaves no temp files") {
    // one file's write time (write + fsync), measured here, is the granularity of the bound
    const int32_t probe = make_seq(pool, k_tokens);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(spill.write(pool, probe, toks(k_tokens, 5000), nullptr));
    const double one_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pool.free_seq(probe);
    const double bound_s = 0.001;  // far less than 24 files take
    const auto r = res.shutdown_spill(bound_s);
    MESSAGE("one file " << one_ms << " ms; bound " << bound_s * 1000 << " ms; spent " << r.ms << " ms; wrote "
                        << r.n_written << ", dropped " << r.n_dropped);
    CHECK(r.n_seqs + r.n_dropped == k_seqs);
    CHECK(r.n_dropped > 0);
    // NOTE: a write already under way finishes its current 32-block chunk, then gives up
    CHECK(r.ms <= bound_s * 1000 + 2 * one_ms + 50);
    CHECK(count_files(dir, ".tmp") == 0);
    CHECK(int32_t(spill.entries().size()) == r.n_written + 1);  // + the probe's file
  }
  SUBCASE("enough time: everything worth it is written, once") {
    const auto r = res.shutdown_spill(600.0);
    CHECK(r.n_seqs == k_seqs);
    CHECK(r.n_written == k_seqs);
    CHECK(r.n_dropped == 0);
    CHECK(r.n_tokens == int64_t(k_seqs) * k_tokens);
    CHECK(r.n_bytes == int64_t(k_seqs) * spill.file_bytes(k_tokens));
    CHECK(res.n_resident() == k_seqs + 1);  // still resident: the caller exits
    const auto again = res.shutdown_spill(600.0);  // already on disk: nothing to write
    CHECK(again.n_seqs == k_seqs);
    CHECK(again.n_written == 0);
  }
  pool.sanity();
  fs::remove_all(dir);
}

TEST_CASE("spill budget: evicts the file whose job resumes last, never one resuming sooner than the new one") {
  const auto dir = fresh_dir("budget");
  const kv_layout lay{2, 2, 4, 4};
  block_pool pool(lay, 64);
  spill_store probe(dir.string() + "-probe", "digest", lay);
  const int64_t one = probe.file_bytes(16);
  fs::remove_all(dir.string() + "-probe");
  spill_store spill(dir.string(), "digest", lay, 3 * one);  // room for three files
  const int32_t seq = make_seq(pool, 16);
  auto put = [&](uint64_t job, double resume_at) {
    spill_store::write_options o;
    o.job_key = job;
    o.resume_at = resume_at;
    return spill.write(pool, seq, toks(16, int32_t(job)), nullptr, o);
  };
  auto jobs = [&] {
    std::set<uint64_t> s;
    for (const auto& e : spill.entries()) s.insert(e.job_key);
    return s;
  };
  CHECK(put(1, 100) == spill_status::ok);
  CHECK(put(2, 200) == spill_status::ok);
  CHECK(put(3, 300) == spill_status::ok);
  CHECK(spill.n_bytes_on_disk() == 3 * one);
  CHECK(put(4, 150) == spill_status::ok);  // job 3 resumes last: evicted
  CHECK(jobs() == std::set<uint64_t>{1, 2, 4});
  CHECK(spill.n_budget_evictions() == 1);
  CHECK(put(5, 400) == spill_status::over_budget);  // every file resumes sooner: the new one is refused
  CHECK(jobs() == std::set<uint64_t>{1, 2, 4});
  CHECK(spill.n_budget_refused() == 1);
  CHECK(put(2, 120) == spill_status::ok);  // a job's newer file replaces its older one: no eviction
  CHECK(jobs() == std::set<uint64_t>{1, 2, 4});
  CHECK(spill.n_budget_evictions() == 1);
  CHECK(spill.n_bytes_on_disk() == 3 * one);
  CHECK(count_files(dir, ".kv") == 3);

  SUBCASE("the order survives a restart (resume_at is in the file)") {
    spill_store reopened(dir.string(), "digest", lay, 3 * one);
    REQUIRE(reopened.entries().size() == 3);
    spill_store::write_options o;
    o.job_key = 6;
    o.resume_at = 130;
    CHECK(reopened.write(pool, seq, toks(16, 6), nullptr, o) == spill_status::ok);  // job 4 (150) goes
    std::set<uint64_t> s;
    for (const auto& e : reopened.entries()) s.insert(e.job_key);
    CHECK(s == std::set<uint64_t>{1, 2, 6});
  }
  SUBCASE("the shutdown spill keeps the jobs resuming soonest") {
    residency_config cfg;
    cfg.spill_min_tokens = 4;
    spill_store fresh((dir / "shutdown").string(), "digest", lay, 2 * one);
    residency res(pool, &fresh, cfg);
    res.keep(resident(pool, 10, 16), 0.0);  // idle (between turns): resumes first
    res.keep(resident(pool, 11, 16), 0.0);
    res.keep(resident(pool, 12, 16), 0.0);
    CHECK(res.park(11, 200.0, 0.0) == park_action::pinned);  // waits 200 s (pinned: the pool is lightly used)
    CHECK(res.park(12, 20.0, 0.0) == park_action::pinned);    // waits 20 s
    const auto r = res.shutdown_spill(600.0);
    CHECK(r.n_seqs == 2);
    CHECK(r.n_dropped == 1);
    std::set<uint64_t> s;
    for (const auto& e : fresh.entries()) s.insert(e.job_key);
    CHECK(s == std::set<uint64_t>{10, 12});
  }
  pool.free_seq(seq);
  fs::remove_all(dir);
}

TEST_CASE("early spill: a pinned wait goes to disk after spill_after_s and stays in memory") {
  const auto dir = fresh_dir("early");
  const kv_layout lay{2, 2, 4, 4};
  block_pool pool(lay, 64);
  spill_store spill(dir.string(), "digest", lay);
  residency_config cfg;
  cfg.spill_min_tokens = 8;
  cfg.spill_after_s = 2.0;
  residency res(pool, &spill, cfg);
  int n_moves = 0;
  res.on_move = [&](const kv_move_event& e) { n_moves += e.what == kv_move_event::kind::spill; };
  res.keep(resident(pool, 7, 20), 0.0);
  CHECK(res.park(7, 100.0, 10.0) == park_action::pinned);
  res.expire(11.0);
  CHECK(spill.entries().empty());
  res.expire(12.5);  // 2 s after the park
  REQUIRE(spill.entries().size() == 1);
  CHECK(spill.entries()[0].job_key == 7);
  CHECK(res.has(7));
  CHECK(res.counters().n_early_spills == 1);
  CHECK(n_moves == 1);
  res.expire(13.0);  // not written twice
  CHECK(n_moves == 1);
  res.expire(500.0);  // the pin's TTL ends: the file already holds it; nothing new written
  CHECK_FALSE(res.has(7));
  CHECK(n_moves == 1);
  CHECK(spill.entries().size() == 1);
  // a restarted process (new store, new residency) deletes the job's file when the job ends
  {
    spill_store reopened(dir.string(), "digest", lay);
    residency res2(pool, &reopened, cfg);
    REQUIRE(reopened.entries().size() == 1);
    res2.release(7);
    CHECK(reopened.entries().empty());
    CHECK(count_files(dir, ".kv") == 0);
  }
  pool.sanity();
  fs::remove_all(dir);
}

TEST_CASE("start-up sweep: dead writers' temp files and torn files go (counted); prune drops ended jobs") {
  const auto dir = fresh_dir("sweep");
  const kv_layout lay{2, 2, 4, 4};
  block_pool pool(lay, 64);
  const int32_t seq = make_seq(pool, 16);
  std::string keep_path, torn_path, other_path;
  {
    spill_store spill(dir.string(), "digest", lay);
    spill_store::write_options o;
    o.job_key = 1;
    REQUIRE(spill.write(pool, seq, toks(16, 1), &keep_path, o) == spill_status::ok);
    o.job_key = 2;
    REQUIRE(spill.write(pool, seq, toks(16, 2), &torn_path, o) == spill_status::ok);
    o.job_key = 3;
    REQUIRE(spill.write(pool, seq, toks(16, 3), &other_path, o) == spill_status::ok);
  }
  fs::resize_file(torn_path, fs::file_size(torn_path) / 2);  // a write cut short (no rename would do this; a disk may)
  // a temp file of a writer that died (a child that exited) and one of a live writer
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  REQUIRE(gone > 0);
  ::waitpid(gone, nullptr, 0);
  const std::string prefix = fs::path(keep_path).filename().string().substr(0, 16);
  const fs::path dead = dir / (prefix + "-00000000000000aa.kv.tmp." + std::to_string(gone));
  const fs::path live = dir / (prefix + "-00000000000000bb.kv.tmp." + std::to_string(::getppid()));
  std::ofstream(dead) << "partial";
  std::ofstream(live) << "in progress";
  spill_store spill(dir.string(), "digest", lay);
  CHECK(spill.entries().size() == 2);
  CHECK(spill.n_corrupt() == 1);
  CHECK(spill.n_orphans_removed() == 1);
  CHECK_FALSE(fs::exists(torn_path));
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));  // its writer is alive
  CHECK(spill.prune([](uint64_t k) { return k == 1; }) == 1);
  CHECK_FALSE(fs::exists(other_path));
  CHECK(fs::exists(keep_path));
  pool.free_seq(seq);
  fs::remove_all(dir);
}
