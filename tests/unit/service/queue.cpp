// Dispatch over a real redis-server: outbox relay, priorities, ack, XAUTOCLAIM reclaim, dead letter,
// continuation routing, reconciler after FLUSHALL / restart / outage, duplicate-delivery fencing.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "queue/queue.h"
#include "queue/redis_client.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using namespace agentq::store;
using agentq::queue::delivery;

using json = nlohmann::json;

namespace {

struct fixture {
  test::temp_dir dir;
  test::redis_server redis;
  std::unique_ptr<store::store> db;
  std::unique_ptr<queue::queue> q;

  explicit fixture(queue::queue_options o = {}) {
    std::string err;
    store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    o.redis.port = redis.port();
    o.redis.backoff_initial_ms = 5;
    o.redis.backoff_max_ms = 50;
    o.reconcile_grace_ms = 0;
    q = std::make_unique<queue::queue>(o, *db);
  }
  std::string create(job_priority p = job_priority::normal) {
    new_job nj;
    nj.tenant = "t";
    nj.request_json = "{}";
    nj.priority = p;
    return db->create_job(nj).get().job.id;
  }
  std::vector<delivery> read_all(const std::string& worker, int max = 100) {
    std::vector<delivery> out;
    for (int i = 0; i < 20 && static_cast<int>(out.size()) < max; ++i) {
      auto d = q->read(worker, max - static_cast<int>(out.size()), 50);
      if (d.empty() && !out.empty()) break;
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }
};

int64_t xlen(test::redis_server& r, const std::string& key) {
  auto s = r.command({"XLEN", key});
  return s.size() > 1 ? std::stoll(s.substr(1)) : -1;
}

}  // namespace

TEST_CASE("publish via outbox, read, claim, ack") {
  fixture f;
  REQUIRE(f.q->ensure_groups("w1"));
  std::string id = f.create();
  CHECK(f.q->relay_once() == 1);
  CHECK(f.db->fetch_outbox("publish", 10).empty());
  CHECK(f.q->relay_once() == 0);
  auto d = f.read_all("w1");
  REQUIRE(d.size() == 1);
  CHECK(d[0].job_id == id);
  CHECK(f.redis.command({"HEXISTS", "agentq:inflight", id}) == ":1");
  auto c = f.db->claim_job(id, "w1", 30000, 5).get();
  CHECK(c.outcome == claim_outcome::claimed);
  CHECK(f.q->ack(d[0]));
  CHECK(f.redis.command({"HEXISTS", "agentq:inflight", id}) == ":0");
  CHECK(xlen(f.redis, "agentq:jobs:normal") == 0);
  CHECK(f.q->read("w1", 10, 50).empty());
}

TEST_CASE("priorities: high before normal before low") {
  fixture f;
  f.q->ensure_groups("w1");
  std::string low = f.create(job_priority::low);
  std::string normal = f.create(job_priority::normal);
  std::string high = f.create(job_priority::high);
  f.q->relay_once();
  auto d1 = f.q->read("w1", 1, 50);
  auto d2 = f.q->read("w1", 1, 50);
  auto d3 = f.q->read("w1", 1, 50);
  REQUIRE(d1.size() == 1);
  REQUIRE(d2.size() == 1);
  REQUIRE(d3.size() == 1);
  CHECK(d1[0].job_id == high);
  CHECK(d2[0].job_id == normal);
  CHECK(d3[0].job_id == low);
}

TEST_CASE("stalled entries are reclaimed with XAUTOCLAIM; touch keeps them") {
  // NOTE: margins of 400 ms either side of the idle limit: with 150 ms, a loaded 2-core CI
  // host once took longer than that between the read and the first reclaim.
  queue::queue_options o;
  o.reclaim_idle_ms = 1000;
  fixture f(o);
  f.q->ensure_groups("w1");
  f.q->ensure_groups("w2");
  std::string a = f.create(), b = f.create();
  f.q->relay_once();
  auto held = f.read_all("w1");
  REQUIRE(held.size() == 2);
  CHECK(f.q->reclaim("w2", 10).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  std::vector<delivery> keep;
  for (auto& d : held)
    if (d.job_id == a) keep.push_back(d);
  CHECK(f.q->touch("w1", keep));  // w1 is still working on a
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto r = f.q->reclaim("w2", 10);
  REQUIRE(r.size() == 1);
  CHECK(r[0].job_id == b);
  CHECK(r[0].reclaimed);
}

TEST_CASE("poison job: dead-lettered after N deliveries and failed with a reason") {
  queue::queue_options o;
  o.reclaim_idle_ms = 20;
  o.max_deliveries = 3;
  fixture f(o);
  f.q->ensure_groups("w");
  std::string id = f.create();
  f.q->relay_once();
  auto d = f.read_all("w");
  REQUIRE(d.size() == 1);
  int claims = 0;
  for (int i = 0; i < 10; ++i) {
    auto c = f.db->claim_job(id, "w", 10, o.max_deliveries).get();  // the worker "crashes" each time
    if (c.outcome == claim_outcome::poisoned) {
      CHECK(f.q->dead_letter(d[0], "poison job"));
      break;
    }
    REQUIRE(c.outcome == claim_outcome::claimed);
    claims++;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto r = f.q->reclaim("w", 10);
    REQUIRE(r.size() == 1);
    d = r;
  }
  CHECK(claims == 3);
  CHECK(xlen(f.redis, "agentq:dead") == 1);
  auto j = f.db->get_job(id);
  CHECK(j->status == job_status::failed);
  CHECK(j->error.find("poison") != std::string::npos);
  CHECK(f.q->reclaim("w", 10).empty());
}

TEST_CASE("continuations go to the live worker holding the KV, else to the shared queue") {
  fixture f;
  f.q->ensure_groups("w1");
  f.q->ensure_groups("w2");
  auto prepare = [&](const std::string& worker) {
    std::string id = f.create();
    f.q->relay_once();
    auto d = f.read_all(worker);
    REQUIRE(d.size() == 1);
    auto c = f.db->claim_job(id, worker, 30000, 5).get();
    REQUIRE(c.outcome == claim_outcome::claimed);
    REQUIRE(f.db->require_action(id, c.won->epoch, R"([{"id":"c1","name":"x","arguments":"{}"}])").get() ==
            write_status::ok);
    f.q->ack(d[0]);
    REQUIRE(f.db->submit_tool_outputs(id, {{"c1", "out"}}).get() == write_status::ok);
    return id;
  };
  CHECK(f.q->heartbeat("w1"));
  std::string id1 = prepare("w1");
  f.q->relay_once();
  CHECK(f.q->read("w2", 10, 50).empty());  // not for w2
  auto d = f.q->read("w1", 10, 50);
  REQUIRE(d.size() == 1);
  CHECK(d[0].job_id == id1);
  CHECK(d[0].continuation);
  // w2 never heartbeats: its continuation goes to the shared stream.
  std::string id2 = prepare("w2");
  f.q->relay_once();
  auto d2 = f.read_all("w1");
  REQUIRE(d2.size() == 1);
  CHECK(d2[0].job_id == id2);
  CHECK_FALSE(d2[0].continuation);

  // Alive but claiming nothing (refused by the control plane, or its engine failed): its
  // continuations go to the shared stream, and one already in its stream is re-published there.
  f.q->ensure_groups("w3");
  auto advert = [&](const std::string& w, json extra) {
    json a = {{"id", w}, {"healthy", true}, {"refused", ""}};
    a.update(extra);
    REQUIRE(f.q->announce(w, "i1", a.dump(), true) == queue::queue::announce_result::ok);
  };
  advert("w3", {{"refused", "the control plane refused the worker token (HTTP 401)"}});
  CHECK_FALSE(f.q->can_resume("w3"));
  std::string id3 = prepare("w3");
  f.q->relay_once();
  auto d3 = f.read_all("w1");
  REQUIRE(d3.size() == 1);
  CHECK(d3[0].job_id == id3);
  CHECK_FALSE(d3[0].continuation);
  f.q->ack(d3[0]);
  REQUIRE(f.db->claim_job(id3, "w1", 30000, 5).get().outcome == claim_outcome::claimed);

  advert("w3", json::object());  // healthy again: its continuation waits for it
  CHECK(f.q->can_resume("w3"));
  std::string id4 = prepare("w3");
  f.q->relay_once();
  CHECK(f.q->heartbeat("w1"));  // (id1 still sits unacked in w1's stream)
  CHECK(f.q->reconcile_once() == 0);
  advert("w3", {{"healthy", false}});  // the engine failed with the entry in its stream
  CHECK(f.q->heartbeat("w1"));
  CHECK(f.q->reconcile_once() == 1);
  auto d4 = f.read_all("w2");
  REQUIRE(d4.size() == 1);
  CHECK(d4[0].job_id == id4);
  CHECK_FALSE(d4[0].continuation);
  f.q->ack(d4[0]);
  REQUIRE(f.db->claim_job(id4, "w2", 30000, 5).get().outcome == claim_outcome::claimed);

  // Overloaded (#28): alive and healthy but every slot busy: any worker re-prefills instead.
  f.q->ensure_groups("w4");
  advert("w4", {{"max_jobs", 4}, {"running_jobs", 4}, {"free_slots", 0}});
  CHECK_FALSE(f.q->can_resume("w4"));
  std::string id5 = prepare("w4");
  f.q->relay_once();
  auto d5 = f.read_all("w2");
  REQUIRE(d5.size() == 1);
  CHECK(d5[0].job_id == id5);
  CHECK_FALSE(d5[0].continuation);
  advert("w4", {{"max_jobs", 4}, {"running_jobs", 3}, {"free_slots", 1}});  // a slot free: affine again
  CHECK(f.q->can_resume("w4"));
}

TEST_CASE("reconciler re-publishes after FLUSHALL, after a restart that lost data, and after an outage") {
  fixture f;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.create());
  f.q->relay_once();
  CHECK(f.q->reconcile_once() == 0);  // all in Redis
  SUBCASE("FLUSHALL") {
    CHECK(f.redis.command({"FLUSHALL"}) == "+OK");
  }
  SUBCASE("restart without persistence") {
    f.redis.kill9();
    std::filesystem::remove_all(f.redis.dir() / "appendonlydir");
    f.redis.start();
  }
  int n = 0;  // the first calls may hit the dropped connection / reconnect backoff
  for (int i = 0; i < 100 && n < 5; ++i) {
    n += f.q->reconcile_once();
    if (n < 5) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(n == 5);
  CHECK(f.q->reconcile_once() == 0);
  f.q->ensure_groups("w");
  auto d = f.read_all("w");
  CHECK(d.size() == 5);
}

TEST_CASE("kill -9 with AOF keeps the queue; an outage delays publishing but loses nothing") {
  fixture f;
  std::string a = f.create();
  f.q->relay_once();
  f.redis.kill9();
  std::string b = f.create();
  CHECK(f.q->relay_once() == 0);  // Redis down: the outbox row stays
  CHECK(f.db->fetch_outbox("publish", 10).size() == 1);
  f.redis.start();
  int n = 0;
  for (int i = 0; i < 50 && n == 0; ++i) {
    n = f.q->relay_once();
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(n == 1);
  CHECK(f.q->reconcile_once() == 0);  // a survived in the AOF, b was relayed
  f.q->ensure_groups("w");
  auto d = f.read_all("w");
  CHECK(d.size() == 2);
  CHECK(f.q->stats().redis.n_io_errors > 0);
}

TEST_CASE("duplicate deliveries: only one claim wins, the loser acks") {
  queue::queue_options o;
  fixture f(o);
  std::string id = f.create();
  f.q->relay_once();
  REQUIRE(f.q->publish(id, 1));  // a reconciler duplicate
  f.q->ensure_groups("w1");
  f.q->ensure_groups("w2");
  auto d1 = f.q->read("w1", 1, 50);
  auto d2 = f.q->read("w2", 1, 50);
  REQUIRE(d1.size() == 1);
  REQUIRE(d2.size() == 1);
  CHECK(f.db->claim_job(id, "w1", 30000, 5).get().outcome == claim_outcome::claimed);
  CHECK(f.db->claim_job(id, "w2", 30000, 5).get().outcome == claim_outcome::busy);
  CHECK(f.q->ack(d2[0]));
}

TEST_CASE("throughput: publish + read + ack") {
  fixture f;
  f.q->ensure_groups("w");
  const int n = 2000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) REQUIRE(f.q->publish("job_" + std::to_string(i), i % 3));
  auto t1 = std::chrono::steady_clock::now();
  int got = 0;
  while (got < n) {
    auto d = f.q->read("w", 64, 50);
    REQUIRE_FALSE(d.empty());
    for (auto& x : d) f.q->ack(x);
    got += static_cast<int>(d.size());
  }
  auto t2 = std::chrono::steady_clock::now();
  std::vector<queue::queue::publish_item> batch;
  for (int i = 0; i < n; ++i) batch.push_back({"job_b" + std::to_string(i), i % 3, {}, {}});
  auto t3 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < batch.size(); i += 256) {
    std::vector<queue::queue::publish_item> part(batch.begin() + i, batch.begin() + std::min(batch.size(), i + 256));
    for (bool ok : f.q->publish_many(part)) REQUIRE(ok);
  }
  auto t4 = std::chrono::steady_clock::now();
  double pub = n / std::chrono::duration<double>(t1 - t0).count();
  double cons = n / std::chrono::duration<double>(t2 - t1).count();
  double pub_batch = n / std::chrono::duration<double>(t4 - t3).count();
  MESSAGE("publish " << pub << " jobs/s one by one, " << pub_batch << " jobs/s pipelined (relay); read+ack " << cons
                     << " jobs/s (AOF fsync always)");
}

TEST_CASE("a read finds the other classes' streams empty in one round trip; by priority as before") {
  fixture f;
  REQUIRE(f.q->ensure_groups("w1", "m"));
  queue::redis_options ro;
  ro.port = f.redis.port();
  queue::redis_client rc(ro);
  auto calls = [&](const std::string& cmd) {
    auto r = rc.command({"INFO", "commandstats"});
    auto key = "cmdstat_" + cmd + ":calls=";
    auto at = r.str.find(key);
    return at == std::string::npos ? int64_t(0) : std::stoll(r.str.substr(at + key.size()));
  };
  // a batch entry waits in the model's batch stream
  std::string batch = f.create(job_priority::batch);
  REQUIRE(f.q->publish(batch, 3, {}, "m"));
  REQUIRE(rc.command({"CONFIG", "RESETSTAT"}).ok());
  CHECK(f.q->read("w1", 16, 0, "m", 0).empty());  // the batch share full: not taken
  // one pipelined round trip of XLENs; the 7 other streams (own, then high..low of the model's and
  // the legacy streams) were 7 XREADGROUPs before
  CHECK(calls("xreadgroup") == 0);
  auto d = f.q->read("w1", 16, 0, "m", 16);
  REQUIRE(d.size() == 1);
  CHECK(d[0].job_id == batch);
  CHECK(calls("xreadgroup") == 2);  // the model's and the legacy batch streams only
  // entries of other classes: read stream by stream by priority, as before (max 3 of 3 high + 5 normal)
  std::vector<std::string> high, normal;
  for (int i = 0; i < 5; ++i) normal.push_back(f.create(job_priority::normal));
  for (int i = 0; i < 3; ++i) high.push_back(f.create(job_priority::high));
  for (auto& id : normal) REQUIRE(f.q->publish(id, 1, {}, "m"));
  for (auto& id : high) REQUIRE(f.q->publish(id, 0, {}, "m"));
  auto three = f.q->read("w1", 3, 0, "m", 0);
  REQUIRE(three.size() == 3);
  for (auto& x : three) CHECK(std::find(high.begin(), high.end(), x.job_id) != high.end());
  CHECK(f.q->read("w1", 16, 0, "m", 0).size() == 5);
}

// interrupt_reads ends a blocking read at once (CLIENT UNBLOCK from the control connection): a
// stopping worker's dispatcher does not wait out its BLOCK. Reads after it block and deliver as before.
TEST_CASE("interrupt_reads: a blocking read ends at once; the next read delivers as before") {
  using namespace std::chrono_literals;
  fixture f;
  REQUIRE(f.q->ensure_groups("w1"));
  auto t0 = std::chrono::steady_clock::now();
  auto reader = std::async(std::launch::async, [&] { return f.q->read("w1", 1, 4000); });
  // NOTE: again until it returns: an interrupt before the read has begun to block is a no-op.
  while (reader.wait_for(100ms) != std::future_status::ready) f.q->interrupt_reads();
  CHECK(reader.get().empty());
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);  // the BLOCK is 4 s
  std::string id = f.create();
  CHECK(f.q->relay_once() == 1);
  auto d = f.q->read("w1", 1, 1000);
  REQUIRE(d.size() == 1);
  CHECK(d[0].job_id == id);
}
