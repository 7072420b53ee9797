// The store writer's two op classes (store/write_queue.h): the rule alone (submits first, the
// background bounded beside them, never starved), then through a real store on a real SQLite file:
// a submit queued behind 200 background writes is applied first in the next transaction.
#include "store/write_queue.h"

#include <doctest/doctest.h>

#include <sqlite3.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "temp_dir.h"

using namespace agentq::store;

TEST_CASE("write_queue: latency ops first, background bounded beside them, all of it when alone") {
  write_queue<int> q(4);
  for (int i = 0; i < 10; ++i) q.push(100 + i, op_class::background);
  q.push(1, op_class::latency);
  q.push(2, op_class::latency);
  std::vector<int> g;
  q.take(g, 512);
  CHECK(g == std::vector<int>{1, 2, 100, 101, 102, 103});  // arrival order within each class
  g.clear();
  q.take(g, 512);  // no submit waiting: the background's whole backlog
  CHECK(g == std::vector<int>{104, 105, 106, 107, 108, 109});
  CHECK(q.empty());
  g.clear();
  q.take(g, 512);
  CHECK(g.empty());
}

TEST_CASE("write_queue: max_ops bounds the group; a steady stream of submits never starves the background") {
  write_queue<int> q(4);
  for (int i = 0; i < 8; ++i) q.push(i, op_class::latency);
  for (int i = 0; i < 8; ++i) q.push(100 + i, op_class::background);
  std::vector<int> g;
  q.take(g, 5);
  CHECK(g == std::vector<int>{0, 1, 2, 3, 4});
  g.clear();
  q.take(g, 5);
  CHECK(g == std::vector<int>{5, 6, 7, 100, 101});  // what max_ops leaves, up to the bound
  // Every group while submits keep arriving still carries the bound's worth of background ops.
  int n_bg = 2;
  for (int round = 0; round < 3; ++round) {
    q.push(round, op_class::latency);
    g.clear();
    q.take(g, 512);
    REQUIRE(g.size() == (round < 1 ? 5u : (round == 1 ? 3u : 1u)));
    n_bg += static_cast<int>(g.size()) - 1;
  }
  CHECK(n_bg == 8);
  CHECK(q.empty());
  g.clear();
  q.push(7, op_class::background);
  q.take(g, 0);  // at least one op whatever max_ops says
  CHECK(g == std::vector<int>{7});
}

TEST_CASE("store: a submit queued behind 200 background writes commits in the next transaction, ahead of them") {
  agentq::test::temp_dir dir;
  auto path = dir.file("jobs.db");
  std::string err;
  store_options o;
  o.path = path;
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  new_job nj;
  nj.tenant = "t";
  nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  auto target = s->create_job(nj).get();
  REQUIRE(target.outcome == create_outcome::created);

  // Hold SQLite's write lock from another connection so the writer stops in its BEGIN with its
  // first group (one background op) taken; everything after that queues behind it.
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  std::vector<std::future<write_status>> bg;
  bg.push_back(s->append_queued_event(target.job.id, "note", R"({"i":0})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 1; i <= 200; ++i)
    bg.push_back(s->append_queued_event(target.job.id, "note", "{\"i\":" + std::to_string(i) + "}"));
  auto submitted = s->create_job(nj);
  REQUIRE(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(other);
  auto created = submitted.get();
  REQUIRE(created.outcome == create_outcome::created);
  for (auto& f : bg) REQUIRE(f.get() == write_status::ok);

  // The order the writer applied them in is the order of their event ids.
  int64_t submit_event = 0;
  int n_notes_before = 0, n_notes = 0;
  for (auto& e : s->read_all_events(0, 10000))
    if (e.job_id == created.job.id) submit_event = e.id;
  REQUIRE(submit_event > 0);
  for (auto& e : s->read_events(target.job.id, 0, 10000))
    if (e.type == "note") {
      ++n_notes;
      if (e.id < submit_event) ++n_notes_before;
    }
  CHECK(n_notes == 201);
  MESSAGE("background writes applied before the submit: " << n_notes_before << " of 201");
  // Only the group the writer had already taken (1 op); a submit leads its own group. In arrival
  // order (before session 22) all 200 came first.
  CHECK(n_notes_before <= 1);
}
