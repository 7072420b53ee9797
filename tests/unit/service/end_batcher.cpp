// worker/end_batcher over a real store and a real redis-server: batch-class job ends that arrive
// together are written in one transaction (store::commit_steps) and acked in one pipeline
// (queue::ack_many); a fenced job in the group is answered fenced, written and acked nothing, and
// the others still commit; a lone end is not held past its linger; commit_end_async answers on the
// batcher's thread after the group's commit and acks, and store::commit_step_async on the writer's.
#include "worker/end_batcher.h"

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "queue/queue.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using namespace agentq::store;
using agentq::queue::delivery;

namespace {

struct fixture {
  test::temp_dir dir;
  test::redis_server redis;
  std::unique_ptr<store::store> db;
  std::unique_ptr<queue::queue> q;

  fixture() {
    std::string err;
    store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    queue::queue_options o;
    o.redis.port = redis.port();
    q = std::make_unique<queue::queue>(o, *db);
    REQUIRE(q->ensure_groups("w1"));
  }
  // n batch jobs, published and read by w1, claimed: (delivery, epoch) each.
  std::vector<std::pair<delivery, int64_t>> claimed(int n) {
    for (int i = 0; i < n; ++i) {
      new_job nj;
      nj.tenant = "t";
      nj.request_json = "{}";
      nj.priority = job_priority::batch;
      REQUIRE(db->create_job(nj).get().outcome == create_outcome::created);
    }
    while (q->relay_once() > 0) {
    }
    std::vector<delivery> ds;
    for (int i = 0; i < 20 && static_cast<int>(ds.size()) < n; ++i) {
      auto d = q->read("w1", n - static_cast<int>(ds.size()), 50);
      ds.insert(ds.end(), d.begin(), d.end());
    }
    REQUIRE(static_cast<int>(ds.size()) == n);
    std::vector<std::pair<delivery, int64_t>> out;
    for (auto& d : ds) {
      auto c = db->claim_job(d.job_id, "w1", 30000, 5).get();
      REQUIRE(c.outcome == claim_outcome::claimed);
      out.push_back({d, c.won->epoch});
    }
    return out;
  }
  // Entries of the batch stream not acked (an ack deletes its entry: queue.cpp k_ack_lua).
  int64_t pending_entries() {
    auto s = redis.command({"XLEN", q->stream_key(3)});
    return s.size() > 1 ? std::stoll(s.substr(1)) : -1;
  }
};

step_item end_of(const std::string& job_id, int64_t epoch) {
  step_item it;
  it.job_id = job_id;
  it.epoch = epoch;
  transcript_row in;
  in.role = "user";
  in.content = "hi";
  it.step.input.push_back(in);
  turn_commit t;
  t.turn_idx = 0;
  t.content = "hello";
  it.step.turn = t;
  it.step.end = job_end{job_status::completed, R"({"content":"hello"})", "", {}};
  return it;
}

}  // namespace

TEST_CASE("end_batcher: ends arriving together share one transaction and one ack pipeline; a fenced one is alone") {
  fixture f;
  const int n = 8;
  auto jobs = f.claimed(n);
  REQUIRE(f.pending_entries() == n);
  // The last job's lease is taken over by another worker: its end must be refused, not written.
  auto& stolen = jobs.back();
  REQUIRE(f.db->fence_worker_leases("w1").get().size() == static_cast<size_t>(n));  // every lease of w1 fenced ...
  std::vector<int64_t> epochs;
  for (auto& [d, e] : jobs) {  // ... and claimed again by w1 except the stolen one (claimed by w2)
    auto c = f.db->claim_job(d.job_id, d.job_id == stolen.first.job_id ? "w2" : "w1", 30000, 5).get();
    REQUIRE(c.outcome == claim_outcome::claimed);
    if (d.job_id != stolen.first.job_id) e = c.won->epoch;  // the stolen one keeps w1's old epoch
  }
  const int64_t tx0 = f.db->stats().n_transactions;

  std::atomic<int> acked_calls{0};
  worker::end_batcher_deps deps;
  deps.commit = [&](std::vector<step_item> items) { return f.db->commit_steps(std::move(items)).get(); };
  deps.ack = [&](const std::vector<delivery>& ds) {
    acked_calls++;
    CHECK(f.q->ack_many(ds) == static_cast<int32_t>(ds.size()));
  };
  deps.n_running = [&] { return n; };  // every job ends: the group goes as soon as all are in
  worker::end_batcher_options o;
  o.linger = std::chrono::seconds(5);  // long: only the n_running rule can close the group in time
  worker::end_batcher b(o, deps);
  std::vector<std::future<write_status>> answers;
  auto t0 = std::chrono::steady_clock::now();
  for (auto& [d, e] : jobs)
    answers.push_back(
        std::async(std::launch::async, [&b, d = d, e = e] { return b.commit_end(end_of(d.job_id, e), d, ""); }));
  for (int i = 0; i < n; ++i) CHECK(answers[i].get() == (i == n - 1 ? write_status::fenced : write_status::ok));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
  CHECK(b.stats().n_groups == 1);
  CHECK(b.stats().n_ends == n);
  CHECK(acked_calls == 1);
  CHECK(f.db->stats().n_transactions - tx0 == 1);
  for (int i = 0; i < n; ++i) {
    auto row = f.db->get_job(jobs[i].first.job_id);
    REQUIRE(row);
    if (i == n - 1) {
      CHECK(row->status == job_status::running);  // w2's: untouched
      CHECK(f.db->read_transcript(row->id).empty());
    } else {
      CHECK(row->status == job_status::completed);
      CHECK(f.db->read_transcript(row->id).size() == 2);  // input + the turn, whole
    }
  }
  CHECK(f.pending_entries() == 1);  // the stolen job's entry is still pending (its owner acks it)
}

TEST_CASE("end_batcher: a lone end waits at most its linger") {
  fixture f;
  auto jobs = f.claimed(1);
  worker::end_batcher_deps deps;
  deps.commit = [&](std::vector<step_item> items) { return f.db->commit_steps(std::move(items)).get(); };
  deps.ack = [&](const std::vector<delivery>& ds) { f.q->ack_many(ds); };
  deps.n_running = [] { return 100; };  // others are running: only the linger closes the group
  worker::end_batcher_options o;
  o.linger = std::chrono::milliseconds(30);
  worker::end_batcher b(o, deps);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(b.commit_end(end_of(jobs[0].first.job_id, jobs[0].second), jobs[0].first, "") == write_status::ok);
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= std::chrono::milliseconds(25));
  CHECK(waited < std::chrono::seconds(2));
  CHECK(f.db->get_job(jobs[0].first.job_id)->status == job_status::completed);
  CHECK(f.pending_entries() == 0);
}

TEST_CASE("commit_steps: one savepoint per job; a transaction that cannot commit answers error for all") {
  fixture f;
  auto jobs = f.claimed(3);
  std::vector<step_item> items;
  for (auto& [d, e] : jobs) items.push_back(end_of(d.job_id, e));
  items[1].epoch += 7;  // fenced
  auto ws = f.db->commit_steps(std::move(items)).get();
  REQUIRE(ws.size() == 3);
  CHECK(ws[0] == write_status::ok);
  CHECK(ws[1] == write_status::fenced);
  CHECK(ws[2] == write_status::ok);
  CHECK(f.db->get_job(jobs[1].first.job_id)->status == job_status::running);
  // Twice: the second is fenced (the jobs are over), nothing written twice.
  std::vector<step_item> again;
  again.push_back(end_of(jobs[0].first.job_id, jobs[0].second));
  CHECK(f.db->commit_steps(std::move(again)).get()[0] == write_status::fenced);
  CHECK(f.db->read_transcript(jobs[0].first.job_id).size() == 2);
  CHECK(f.db->commit_steps({}).get().empty());
}

TEST_CASE("end_batcher: commit_end_async returns at once; done runs on the batcher's thread after the commit and ack") {
  fixture f;
  const int n = 4;
  auto jobs = f.claimed(n);
  jobs.back().second += 7;  // a stale epoch: fenced, neither written nor acked
  worker::end_batcher_deps deps;
  deps.commit = [&](std::vector<step_item> items) { return f.db->commit_steps(std::move(items)).get(); };
  deps.ack = [&](const std::vector<delivery>& ds) { f.q->ack_many(ds); };
  deps.n_running = [&] { return n; };
  worker::end_batcher_options o;
  o.linger = std::chrono::seconds(5);  // only the n_running rule closes the group in time
  worker::end_batcher b(o, deps);
  std::mutex mu;
  std::vector<std::pair<std::string, write_status>> answers;  // (job id, answer), in answer order
  std::vector<std::thread::id> answered_on;
  std::vector<int64_t> entries_seen;  // the stream's unacked entries when each answer came
  std::promise<void> all;
  for (auto& [d, e] : jobs) {
    const auto t0 = std::chrono::steady_clock::now();
    b.commit_end_async(end_of(d.job_id, e), d, "", [&, id = d.job_id](write_status ws) {
      std::lock_guard lock(mu);
      answers.push_back({id, ws});
      answered_on.push_back(std::this_thread::get_id());
      entries_seen.push_back(f.pending_entries());
      if (static_cast<int>(answers.size()) == n) all.set_value();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));  // queued, not waited on
  }
  REQUIRE(all.get_future().wait_for(std::chrono::seconds(4)) == std::future_status::ready);
  std::lock_guard lock(mu);
  for (int i = 0; i < n; ++i) {
    CHECK(answers[i].first == jobs[i].first.job_id);
    CHECK(answers[i].second == (i == n - 1 ? write_status::fenced : write_status::ok));
    CHECK(answered_on[i] != std::this_thread::get_id());
    CHECK(answered_on[i] == answered_on[0]);  // one thread: the batcher's
    CHECK(entries_seen[i] == 1);              // the three written were acked before any answer
    CHECK(f.db->get_job(jobs[i].first.job_id)->status == (i == n - 1 ? job_status::running : job_status::completed));
  }
  CHECK(b.stats().n_groups == 1);
}

TEST_CASE("store::commit_step_async: done after the commit, on the writer thread; a stale epoch answers fenced") {
  fixture f;
  auto jobs = f.claimed(2);
  std::promise<std::pair<write_status, std::thread::id>> ok, stale;
  f.db->commit_step_async(jobs[0].first.job_id, jobs[0].second, end_of(jobs[0].first.job_id, 0).step,
                          [&](write_status ws) { ok.set_value({ws, std::this_thread::get_id()}); });
  f.db->commit_step_async(jobs[1].first.job_id, jobs[1].second + 1, end_of(jobs[1].first.job_id, 0).step,
                          [&](write_status ws) { stale.set_value({ws, std::this_thread::get_id()}); });
  auto a = ok.get_future().get();
  auto b = stale.get_future().get();
  CHECK(a.first == write_status::ok);
  CHECK(b.first == write_status::fenced);
  CHECK(a.second != std::this_thread::get_id());
  CHECK(a.second == b.second);  // the store's one writer
  CHECK(f.db->get_job(jobs[0].first.job_id)->status == job_status::completed);  // readable once answered
  CHECK(f.db->read_transcript(jobs[0].first.job_id).size() == 2);
  CHECK(f.db->get_job(jobs[1].first.job_id)->status == job_status::running);
}
