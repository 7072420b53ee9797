// --tenant-max-running in the store (store/running_limit.cpp): claims past a tenant's limit hold the
// job (attempts and epoch untouched, one "waiting" event), two stores on one file (two processes)
// share the limit, a job leaving `running` promotes the oldest held one through the outbox, fresh
// jobs queue behind held ones, other tenants are not held, and refill_held releases what a removed
// limit left held. Real SQLite files.
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "store/store.h"
#include "temp_dir.h"

using namespace agentq::store;

namespace {

std::unique_ptr<store> open_limited(const std::string& path, int64_t limit) {
  std::string err;
  store_options o;
  o.path = path;
  o.tenant_max_running = limit;
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  return s;
}

std::string make_job(store& s, const std::string& tenant) {
  new_job nj;
  nj.tenant = tenant;
  nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  auto r = s.create_job(nj).get();
  REQUIRE(r.outcome == create_outcome::created);
  return r.job.id;
}

claim_result claim(store& s, const std::string& id, const std::string& worker) {
  return s.claim_job(id, worker, 30000, 3).get();
}

// The reason of the job's first "waiting" event ("" if none) and its held_ahead count.
std::pair<std::string, int64_t> waiting_reason(store& s, const std::string& id) {
  for (auto& e : s.read_events(id, 0, 100))
    if (e.type == "waiting") {
      auto d = nlohmann::json::parse(e.data_json);
      return {d.value("reason", ""), d.value("held_ahead", int64_t(-1))};
    }
  return {"", -1};
}

int n_waiting(store& s, const std::string& id) {
  auto ev = s.read_events(id, 0, 100);
  return int(std::count_if(ev.begin(), ev.end(), [](const job_event& e) { return e.type == "waiting"; }));
}

// The job ids of pending publish rows (then completed, as the relay would).
std::vector<std::string> drain_publish(store& s) {
  std::vector<std::string> ids;
  std::vector<int64_t> rows;
  for (auto& r : s.fetch_outbox("publish", 1000)) {
    ids.push_back(r.job_id);
    rows.push_back(r.id);
  }
  s.complete_outbox(rows).get();
  return ids;
}

void finish(store& s, const claim_result& c) {
  REQUIRE(c.won);
  CHECK(s.finish_job(c.won->job_id, c.won->epoch, job_status::completed, "{}", "", {}).get() == write_status::ok);
}

}  // namespace

TEST_CASE("tenant max running: held past the limit on any worker, promoted in order as slots free") {
  agentq::test::temp_dir dir;
  auto w1 = open_limited(dir.file("jobs.db"), 2);
  auto w2 = open_limited(dir.file("jobs.db"), 2);  // a second process on the same file
  std::vector<std::string> a;
  for (int i = 0; i < 5; ++i) a.push_back(make_job(*w1, "ta"));
  auto b = make_job(*w1, "tb");
  drain_publish(*w1);

  auto c0 = claim(*w1, a[0], "w1");
  auto c1 = claim(*w2, a[1], "w2");
  CHECK(c0.outcome == claim_outcome::claimed);
  CHECK(c1.outcome == claim_outcome::claimed);
  for (int i = 2; i < 5; ++i) CHECK(claim(*(i % 2 ? w1 : w2), a[i], "w").outcome == claim_outcome::held);
  CHECK(claim(*w2, b, "w2").outcome == claim_outcome::claimed);  // another tenant is not held

  auto j2 = w1->get_job(a[2]);
  CHECK(j2->status == job_status::queued);
  CHECK(j2->attempts == 0);
  CHECK(j2->lease_epoch == 0);
  CHECK(n_waiting(*w1, a[2]) == 1);
  CHECK(n_waiting(*w1, b) == 0);
  // At the limit, the event says so.
  CHECK(waiting_reason(*w1, a[2]).first.starts_with("this tenant has 2 jobs running, its limit is 2"));
  CHECK(waiting_reason(*w1, a[2]).second == 0);
  // Held again (a stale entry delivered twice): no second event.
  CHECK(claim(*w1, a[2], "w1").outcome == claim_outcome::held);
  CHECK(n_waiting(*w1, a[2]) == 1);
  // Held jobs are not the reconciler's: it would bounce them through Redis.
  for (auto& j : w1->list_dispatchable(-1000, 100)) CHECK(std::find(a.begin(), a.end(), j.id) == a.end());
  CHECK(w1->refill_held() == 0);  // no free slot

  // One finishes on w2: the oldest held one (a[2]) is promoted, in that transaction.
  finish(*w2, c1);
  CHECK(drain_publish(*w1) == std::vector<std::string>{a[2]});
  // A fresh job of ta waits behind the held ones, even with the promoted one still on its way.
  auto a5 = make_job(*w1, "ta");
  drain_publish(*w1);
  CHECK(claim(*w1, a5, "w1").outcome == claim_outcome::held);
  auto c2 = claim(*w1, a[2], "w1");
  CHECK(c2.outcome == claim_outcome::claimed);
  CHECK(c2.won->job.attempts == 1);

  // Ends of any kind free a slot: cancel, requires_action.
  CHECK(w2->cancel_job(a[0]).get() == write_status::ok);
  CHECK(drain_publish(*w1) == std::vector<std::string>{a[3]});
  auto c3 = claim(*w2, a[3], "w2");
  CHECK(c3.outcome == claim_outcome::claimed);
  CHECK(w1->require_action(a[3], c3.won->epoch, "[]").get() == write_status::ok);
  CHECK(drain_publish(*w1) == std::vector<std::string>{a[4]});
  CHECK(claim(*w1, a[4], "w1").outcome == claim_outcome::claimed);
  finish(*w1, c2);
  CHECK(drain_publish(*w1) == std::vector<std::string>{a5});
}

TEST_CASE("tenant max running: a job held behind older held ones says so, not that the tenant is at its limit") {
  agentq::test::temp_dir dir;
  std::vector<std::string> a;
  {
    auto s = open_limited(dir.file("jobs.db"), 1);
    for (int i = 0; i < 3; ++i) a.push_back(make_job(*s, "ta"));
    drain_publish(*s);
    CHECK(claim(*s, a[0], "w1").outcome == claim_outcome::claimed);
    CHECK(claim(*s, a[1], "w1").outcome == claim_outcome::held);
  }
  // The limit raised to 3 (a restart): slots are free, but a[1] waits already, so the fresh a[2]
  // queues behind it (FIFO per tenant) and its event names that cause.
  auto s = open_limited(dir.file("jobs.db"), 3);
  CHECK(claim(*s, a[2], "w1").outcome == claim_outcome::held);
  auto [why, ahead] = waiting_reason(*s, a[2]);
  CHECK(ahead == 1);
  CHECK(why.find("1 job running of its limit of 3") != std::string::npos);
  CHECK(why.find("but it already has 1 job waiting for a slot, submitted earlier, and they go first") !=
        std::string::npos);
  CHECK(why.find("its limit is") == std::string::npos);
  // The hold's refill promoted both, oldest first.
  CHECK(drain_publish(*s) == std::vector<std::string>{a[1], a[2]});
}

TEST_CASE("tenant max running: a removed limit releases the held jobs (refill_held)") {
  agentq::test::temp_dir dir;
  std::vector<std::string> a;
  {
    auto s = open_limited(dir.file("jobs.db"), 1);
    for (int i = 0; i < 3; ++i) a.push_back(make_job(*s, "ta"));
    drain_publish(*s);
    CHECK(claim(*s, a[0], "w1").outcome == claim_outcome::claimed);
    CHECK(claim(*s, a[1], "w1").outcome == claim_outcome::held);
    CHECK(claim(*s, a[2], "w1").outcome == claim_outcome::held);
  }
  auto s = open_limited(dir.file("jobs.db"), 0);
  CHECK(s->refill_held() == 2);
  auto ids = drain_publish(*s);
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> want{a[1], a[2]};
  std::sort(want.begin(), want.end());
  CHECK(ids == want);
  CHECK(claim(*s, a[1], "w1").outcome == claim_outcome::claimed);
  CHECK(claim(*s, a[2], "w1").outcome == claim_outcome::claimed);
  CHECK(s->refill_held() == 0);
}
