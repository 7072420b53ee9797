// Stable worker identities (#28): ids derived from the host and data dir, kept in the data dir and
// locked per process (slots for several workers on one dir); a restart fences the leases its id
// held; the Redis announce lets the newest run of an id take it over and tells an older run.
#include <doctest/doctest.h>

#include <fstream>

#include "queue/queue.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"
#include "worker/identity.h"

using namespace agentq;
using agentq::worker::worker_identity;

TEST_CASE("worker identity: derived, persisted, one process per id, slots for shared data dirs") {
  test::temp_dir dir;
  std::string err;
  std::string first_id;
  {
    auto a = worker_identity::acquire("", dir.path().string(), &err);
    REQUIRE_MESSAGE(a, err);
    first_id = a->id();
    CHECK(worker_identity::valid_id(first_id));
    std::ifstream f(dir.file("worker-id"));
    std::string stored;
    std::getline(f, stored);
    CHECK(stored == first_id);
    // A second process on the same dir while the first lives: the next slot, a different id.
    auto b = worker_identity::acquire("", dir.path().string(), &err);
    REQUIRE_MESSAGE(b, err);
    CHECK(b->id() != a->id());
    CHECK(b->id() == first_id + "-1");
    CHECK(a->incarnation() != b->incarnation());
  }
  // Both gone (a restart): the same ids again, new incarnations.
  auto again = worker_identity::acquire("", dir.path().string(), &err);
  REQUIRE(again);
  CHECK(again->id() == first_id);
  // Another data dir on the same host: another id.
  test::temp_dir other;
  auto elsewhere = worker_identity::acquire("", other.path().string(), &err);
  REQUIRE(elsewhere);
  CHECK(elsewhere->id() != first_id);

  // An explicit id: checked, and held by one process at a time.
  auto g = worker_identity::acquire("gpu-a.01", dir.path().string(), &err);
  REQUIRE(g);
  CHECK(g->id() == "gpu-a.01");
  CHECK_FALSE(worker_identity::acquire("gpu-a.01", dir.path().string(), &err));
  CHECK(err.find("in use") != std::string::npos);
  for (const char* bad : {"has space", "a/b", "x:y", "", "\xc3\xa9"}) {
    CAPTURE(bad);
    if (std::string(bad).empty()) continue;  // empty = derive
    CHECK_FALSE(worker_identity::acquire(bad, dir.path().string(), &err));
  }
  CHECK_FALSE(worker_identity::valid_id(std::string(65, 'a')));
}

TEST_CASE("fence_worker_leases: the restarted id's running jobs are fenced and claimable at once") {
  test::temp_dir dir;
  std::string err;
  store::store_options so;
  so.path = dir.file("jobs.db");
  auto db = store::store::open(so, &err);
  REQUIRE_MESSAGE(db, err);
  auto make = [&] {
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = "{}";
    return db->create_job(nj).get().job.id;
  };
  std::string held = make(), other = make(), waiting = make();
  auto c1 = db->claim_job(held, "w1", 60000, 5).get();
  REQUIRE(c1.outcome == store::claim_outcome::claimed);
  REQUIRE(db->claim_job(other, "w2", 60000, 5).get().outcome == store::claim_outcome::claimed);
  // A live lease: nobody else may claim it.
  CHECK(db->claim_job(held, "w3", 60000, 5).get().outcome == store::claim_outcome::busy);

  auto fenced = db->fence_worker_leases("w1").get();
  REQUIRE(fenced.size() == 1);
  CHECK(fenced[0] == held);
  // The old run's writes are refused now, its lease renewal too.
  CHECK(db->commit_turn(held, c1.won->epoch, store::turn_commit{}).get() == store::write_status::fenced);
  CHECK(db->renew_leases({{held, c1.won->epoch}}, 60000).get() == std::vector<std::string>{held});
  // Claimable at once (no lease wait), epoch past the fence; attempts not charged for the restart.
  auto c2 = db->claim_job(held, "w1", 60000, 5).get();
  REQUIRE(c2.outcome == store::claim_outcome::claimed);
  CHECK(c2.won->epoch == c1.won->epoch + 2);
  CHECK(c2.won->job.attempts == 2);
  // Other workers' jobs and queued jobs are untouched.
  CHECK(db->get_job(other)->lease_epoch == 1);
  CHECK(db->get_job(waiting)->status == store::job_status::queued);
  CHECK(db->fence_worker_leases("nobody").get().empty());
}

TEST_CASE("announce: the newest run of an id takes it over; the older run learns it is superseded") {
  test::temp_dir dir;
  test::redis_server redis(false);
  std::string err;
  store::store_options so;
  so.path = dir.file("jobs.db");
  auto db = store::store::open(so, &err);
  REQUIRE_MESSAGE(db, err);
  queue::queue_options qo;
  qo.redis.port = redis.port();
  qo.heartbeat_ttl_ms = 60000;
  queue::queue q(qo, *db);
  using ar = queue::queue::announce_result;

  CHECK(q.announce("w1", "run-a", R"({"id":"w1","run":"a"})", true) == ar::ok);
  CHECK(q.announce("w1", "run-a", R"({"id":"w1","run":"a"})", false) == ar::ok);
  CHECK(q.is_alive("w1"));
  auto listed = q.list_workers();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0] == R"({"id":"w1","run":"a"})");

  // A restart (or a duplicate): run b takes the id over; run a's next heartbeat is refused.
  CHECK(q.announce("w1", "run-b", R"({"id":"w1","run":"b"})", true) == ar::ok);
  CHECK(q.announce("w1", "run-a", R"({"id":"w1","run":"a"})", false) == ar::superseded);
  listed = q.list_workers();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0] == R"({"id":"w1","run":"b"})");  // run a changed nothing
  CHECK(q.announce("w2", "run-c", R"({"id":"w2"})", true) == ar::ok);
  CHECK(q.list_workers().size() == 2);

  // A worker whose heartbeat lapsed drops out of the list.
  redis.command({"DEL", "agentq:worker:w2:info"});
  CHECK(q.list_workers().size() == 1);
}

TEST_CASE("read_pending: entries a previous run of the id read and never acked come back to it") {
  test::temp_dir dir;
  test::redis_server redis(false);
  std::string err;
  store::store_options so;
  so.path = dir.file("jobs.db");
  auto db = store::store::open(so, &err);
  REQUIRE_MESSAGE(db, err);
  queue::queue_options qo;
  qo.redis.port = redis.port();
  store::new_job nj;
  nj.tenant = "t";
  nj.request_json = "{}";
  auto id = db->create_job(nj).get().job.id;
  {
    queue::queue before(qo, *db);
    REQUIRE(before.ensure_groups("w1"));
    REQUIRE(before.relay_once() == 1);
    std::vector<queue::delivery> got;
    for (int i = 0; i < 20 && got.empty(); ++i) got = before.read("w1", 10, 50);
    REQUIRE(got.size() == 1);  // read, never acked: the run "dies" here
  }
  queue::queue after(qo, *db);
  CHECK(after.read("w1", 10, 50).empty());  // '>' gives nothing new
  auto pending = after.read_pending("w1", 10);
  REQUIRE(pending.size() == 1);
  CHECK(pending[0].job_id == id);
  CHECK(pending[0].reclaimed);
  CHECK(after.read_pending("w2", 10).empty());  // another consumer's entries are not its own
  CHECK(after.ack(pending[0]));
  CHECK(after.read_pending("w1", 10).empty());
}
