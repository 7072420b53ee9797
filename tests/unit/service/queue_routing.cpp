// Routing by model (#28) over a real redis-server: with route_by_model the relay publishes each job
// to its model's stream, a consumer serving model A never reads B's jobs, legacy streams are still
// read, and a job whose model no live worker advertises gets a "waiting" event with the reason.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "queue/queue.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

struct fixture {
  test::temp_dir dir;
  test::redis_server redis{false};
  std::unique_ptr<store::store> db;
  std::unique_ptr<queue::queue> q;
  fixture() {
    std::string err;
    store::store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    queue::queue_options qo;
    qo.redis.port = redis.port();
    qo.route_by_model = true;
    qo.heartbeat_ttl_ms = 60000;
    q = std::make_unique<queue::queue>(qo, *db);
  }
  std::string create(const std::string& model) {
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = model.empty() ? "{}" : json{{"model", model}}.dump();
    return db->create_job(nj).get().job.id;
  }
  std::vector<queue::delivery> read_all(const std::string& worker, const std::string& model) {
    std::vector<queue::delivery> out;
    for (int i = 0; i < 5; ++i) {
      auto d = q->read(worker, 100, 20, model);
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }
};

std::vector<std::string> event_types(store::store& db, const std::string& id) {
  std::vector<std::string> out;
  for (auto& e : db.read_events(id, 0, 100)) out.push_back(e.type);
  return out;
}

}  // namespace

TEST_CASE("jobs go to their model's stream; a worker reads only the models it serves") {
  fixture f;
  REQUIRE(f.q->announce("wa", "i1", json{{"id", "wa"}, {"models", {{{"name", "alpha"}}}}}.dump(), true) ==
          queue::queue::announce_result::ok);
  std::string a = f.create("alpha"), b = f.create("beta");
  REQUIRE(f.q->ensure_groups("wa", "alpha"));
  CHECK(f.q->relay_once() == 2);
  CHECK(f.redis.command({"XLEN", "agentq:jobs:alpha:normal"}) == ":1");
  CHECK(f.redis.command({"XLEN", "agentq:jobs:beta:normal"}) == ":1");
  auto got = f.read_all("wa", "alpha");
  REQUIRE(got.size() == 1);
  CHECK(got[0].job_id == a);
  CHECK(got[0].stream == "agentq:jobs:alpha:normal");
  // beta: nobody serves it: it waits, and its events say why; alpha got no such event.
  auto types = event_types(*f.db, b);
  CHECK(std::count(types.begin(), types.end(), "waiting") == 1);
  auto ev = f.db->read_events(b, 0, 100);
  for (auto& e : ev)
    if (e.type == "waiting") CHECK(json::parse(e.data_json)["reason"].get<std::string>().find("'beta'") != std::string::npos);
  types = event_types(*f.db, a);
  CHECK(std::count(types.begin(), types.end(), "waiting") == 0);
  // A worker for beta appears: it reads beta's entry.
  auto got_b = f.read_all("wb", "beta");
  REQUIRE(got_b.size() == 1);
  CHECK(got_b[0].job_id == b);
  // The reconciler re-publishes a lost entry to its model's stream too.
  f.redis.command({"FLUSHALL"});
  f.q = std::make_unique<queue::queue>([&] {
    queue::queue_options qo;
    qo.redis.port = f.redis.port();
    qo.route_by_model = true;
    qo.reconcile_grace_ms = 0;
    return qo;
  }(), *f.db);
  CHECK(f.q->reconcile_once() == 2);
  CHECK(f.redis.command({"XLEN", "agentq:jobs:beta:normal"}) == ":1");
}

TEST_CASE("legacy streams are still read by every worker; without route_by_model nothing changes") {
  fixture f;
  // An entry published the old way (no model: the legacy stream).
  std::string old = f.create("alpha");
  REQUIRE(f.q->publish(old, 1));
  auto got = f.read_all("wa", "alpha");
  REQUIRE(got.size() == 1);
  CHECK(got[0].stream == "agentq:jobs:normal");
  CHECK(f.q->ack(got[0]));
  CHECK(f.db->job_models({old, "job_missing"}) == std::map<std::string, std::string>{{old, "alpha"}});
}
