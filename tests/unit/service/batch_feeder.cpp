// The batch feeder over a real redis-server and SQLite store (issue 29): accepted batch lines reach
// the batch stream through a bounded window, dealt round-robin between tenants, so a second
// tenant's small batch submitted after a big one is read within about a window of entries; refused
// lines are skipped; a new feeder resumes from the saved cursor; jobs Redis lost are published again.
#include <doctest/doctest.h>

#include <map>

#include "api/batch_feeder.h"
#include "queue/queue.h"
#include "redis_server.h"
#include "store/batch_store.h"
#include "store/store.h"
#include "accepted_batch.h"
#include "temp_dir.h"

using namespace agentq;

namespace {

struct fixture {
  test::temp_dir dir;
  test::redis_server redis;
  std::unique_ptr<store::store> db;
  std::unique_ptr<store::batch_store> batches, feed_batches;
  std::unique_ptr<queue::queue> q;

  fixture() {
    std::string err;
    store::store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    batches = store::batch_store::open(so.path, &err);
    REQUIRE_MESSAGE(batches, err);
    feed_batches = store::batch_store::open(so.path, &err);
    REQUIRE_MESSAGE(feed_batches, err);
    queue::queue_options o;
    o.redis.port = redis.port();
    o.redis.backoff_initial_ms = 5;
    o.redis.backoff_max_ms = 50;
    q = std::make_unique<queue::queue>(o, *db);
  }
  std::unique_ptr<api::batch_feeder> feeder(int32_t window) {
    api::batch_feeder_options fo;
    fo.window = window;
    fo.reconcile_grace_ms = -1000;
    return std::make_unique<api::batch_feeder>(fo, api::batch_feeder_deps{feed_batches.get(), db.get(), q.get()});
  }
  // A batch of n accepted lines for tenant; lines whose index is in refused get no job.
  store::batch_row batch(const std::string& tenant, int64_t n, std::vector<int64_t> refused = {}) {
    return test::accepted_batch(*batches, tenant, n, refused);
  }
  // Read up to max entries of the batch stream as a worker would, acking each: their job ids.
  std::vector<std::string> take(int max) {
    std::vector<std::string> ids;
    for (auto& d : q->read("w", max, 0)) {
      ids.push_back(d.job_id);
      q->ack(d);
    }
    return ids;
  }
};

}  // namespace

TEST_CASE("batch feeder: a second tenant's small batch is not stuck behind a big one") {
  fixture f;
  f.q->ensure_groups("w");
  auto big = f.batch("a", 3000);
  auto small = f.batch("b", 10);
  std::map<std::string, std::string> tenant_of;
  for (auto* b : {&big, &small})
    for (auto& r : f.batches->results(b->id, 0, 5000)) tenant_of[r.job_id] = b->tenant;
  auto feeder = f.feeder(64);
  const std::string stream = f.q->stream_key(static_cast<int>(store::job_priority::batch));
  std::vector<std::string> order;  // tenants in the order a worker read their jobs
  std::vector<std::string> a_ids;
  for (int pass = 0; pass < 400 && order.size() < 3010; ++pass) {
    feeder->feed_once();
    auto len = f.q->stream_length(stream);
    REQUIRE(len);
    CHECK(*len <= 64);  // the window holds
    for (auto& id : f.take(16)) {
      order.push_back(tenant_of.at(id));
      if (tenant_of[id] == "a") a_ids.push_back(id);
    }
  }
  REQUIRE(order.size() == 3010);
  int64_t last_b = -1;
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == "b") last_b = int64_t(i);
  MESSAGE("tenant b's last job was read at position " << last_b << " of " << order.size());
  CHECK(last_b < 64 + 2 * 10);  // at most a window of a's jobs, then alternating
  // within a tenant, lines go in order
  std::vector<std::string> a_sorted;
  for (auto& r : f.batches->results(big.id, 0, 5000)) a_sorted.push_back(r.job_id);
  CHECK(a_ids == a_sorted);
  CHECK(feeder->stats().n_published == 3010);
}

TEST_CASE("batch feeder: refused lines skipped, cursor resumed, lost entries published again") {
  fixture f;
  f.q->ensure_groups("w");
  auto b = f.batch("a", 100, {0, 1, 50, 99});
  auto feeder = f.feeder(30);
  CHECK(feeder->feed_once() == 30);
  CHECK(f.take(100).size() == 30);
  feeder->save_cursors();
  int64_t cursor = f.feed_batches->feed_cursor(b.id);
  CHECK(cursor == 32);  // two refused lines, then 30 jobs
  // A restarted feeder goes on from the saved cursor: every job exactly once.
  feeder.reset();
  auto again = f.feeder(1000);
  CHECK(again->feed_once() == 66);
  CHECK(f.take(100).size() == 66);
  again->save_cursors();
  CHECK(f.feed_batches->feed_cursor(b.id) == 100);
  // Redis loses what it held: the queued jobs it had are published again by the reconcile pass
  // (the store's reconciler leaves queued batch jobs to the feeder).
  CHECK(f.db->list_dispatchable(-1000, 1000).empty());
  f.redis.command({"FLUSHALL"});
  f.q->ensure_groups("w");
  CHECK(again->reconcile_once() == 96);
  CHECK(f.take(200).size() == 96);
  // a final batch's cursor is dropped with it
  CHECK(f.batches->transition(b.id, store::batch_status::validating, store::batch_status::cancelled));
  CHECK(f.feed_batches->feed_cursor(b.id) == 0);
}
