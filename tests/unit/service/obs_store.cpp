// Observability tables on a real SQLite file: timeline writes are fenced on the lease epoch, the
// timeline is derived from status events + turn usage + recorded spans, engine samples round-trip
// in the /v1/engine/stats shape and are pruned, each worker's latest families are kept.
#include "obs/obs_store.h"

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "store_obs_fixture.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

// jobs.db: the file name this test has always used.
struct fixture : test::store_obs_fixture {
  fixture() : store_obs_fixture("jobs.db") {}
  store::job_row job() { return new_job(); }
};

obs::timeline_entry tool_span(int64_t start, int64_t end) {
  obs::timeline_entry e;
  e.kind = "tool";
  e.start_ms = start;
  e.end_ms = end;
  e.turn = 0;
  e.label = "look";
  e.attrs = {{"name", "look"}, {"retries", 1}};
  return e;
}

std::map<std::string, int> kinds(const json& arr) {
  std::map<std::string, int> n;
  for (const auto& x : arr) n[x["kind"].get<std::string>()]++;
  return n;
}

}  // namespace

TEST_CASE("timeline: fenced writes, derived spans and marks") {
  fixture f;
  auto j = f.job();
  auto c = f.st->claim_job(j.id, "w1", 30000, 5).get();
  REQUIRE(c.outcome == store::claim_outcome::claimed);
  int64_t epoch = c.won->epoch;
  int64_t t = store::now_ms();
  CHECK(f.obs->record(j.id, epoch, tool_span(t, t + 50)));
  CHECK_FALSE(f.obs->record(j.id, epoch + 1, tool_span(t, t + 60)));  // a stale or foreign epoch writes nothing
  CHECK_FALSE(f.obs->record("job_missing", epoch, tool_span(t, t + 60)));
  obs::timeline_entry parked;
  parked.kind = "parked";
  parked.start_ms = t + 50;
  parked.label = "KV parked";
  CHECK(f.obs->record(j.id, epoch, parked));

  store::turn_commit tc;
  tc.turn_idx = 0;
  tc.content = "hello";
  tc.turn_usage_json =
      json{{"prompt_tokens", 10}, {"cached_tokens", 4}, {"computed_tokens", 6}, {"completion_tokens", 5},
           {"queue_ms", 2.0},     {"prefill_ms", 7.0},  {"decode_ms", 20.0}}
          .dump();
  tc.job_usage.turns = 1;
  REQUIRE(f.st->commit_turn(j.id, epoch, tc).get() == store::write_status::ok);

  auto running = f.obs->timeline(*f.st->get_job(j.id));
  CHECK(running["object"] == "job.timeline");
  CHECK(running["finished_ms"].is_null());
  auto sk = kinds(running["spans"]);
  CHECK(sk["tool"] == 1);
  CHECK(sk["parked"] == 1);
  CHECK(sk["prefill"] == 1);
  CHECK(sk["decode"] == 1);
  CHECK(sk["queue_wait"] == 2);  // the job queue, and the turn's engine queue
  for (const auto& s : running["spans"]) {
    if (s["kind"] == "parked") CHECK(s["end_ms"].is_null());
    if (s["kind"] == "prefill") {
      CHECK(s["attrs"]["cached_tokens"] == 4);
      CHECK(s["attrs"]["computed_tokens"] == 6);
      CHECK(s["end_ms"].get<int64_t>() - s["start_ms"].get<int64_t>() == 7);
    }
    if (s["kind"] == "decode") CHECK(s["attrs"]["tokens"] == 5);
  }

  REQUIRE(f.obs->close_open(j.id, epoch, "parked", t + 80));
  REQUIRE(f.st->finish_job(j.id, epoch, store::job_status::completed, "{}", "", {}).get() == store::write_status::ok);
  auto done = f.obs->timeline(*f.st->get_job(j.id));
  CHECK(done["status"] == "completed");
  CHECK(done["finished_ms"].is_number_integer());
  auto mk = kinds(done["marks"]);
  CHECK(mk["queued"] == 1);
  CHECK(mk["claimed"] == 1);
  CHECK(mk["completed"] == 1);
  for (const auto& m : done["marks"])
    if (m["kind"] == "claimed") CHECK(m["attrs"]["worker"] == "w1");
  for (const auto& s : done["spans"])
    if (s["kind"] == "parked") CHECK(s["end_ms"] == t + 80);
  // spans sorted by start
  int64_t prev = 0;
  for (const auto& s : done["spans"]) {
    CHECK(s["start_ms"].get<int64_t>() >= prev);
    prev = s["start_ms"];
  }
}

TEST_CASE("timeline: a lost lease shows as a retry; requires_action as a client wait") {
  fixture f;
  auto j = f.job();
  auto c1 = f.st->claim_job(j.id, "w1", 1, 5).get();  // 1 ms lease: expires at once
  REQUIRE(c1.outcome == store::claim_outcome::claimed);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto c2 = f.st->claim_job(j.id, "w2", 30000, 5).get();
  REQUIRE(c2.outcome == store::claim_outcome::claimed);
  CHECK_FALSE(f.obs->record(j.id, c1.won->epoch, tool_span(1, 2)));  // w1 is fenced out
  REQUIRE(f.st->require_action(j.id, c2.won->epoch, R"([{"id":"call_aq0_0","name":"ask","arguments":"{}"}])").get() ==
          store::write_status::ok);
  auto t = f.obs->timeline(*f.st->get_job(j.id));
  auto mk = kinds(t["marks"]);
  CHECK(mk["claimed"] == 2);
  CHECK(mk["retry"] == 1);
  CHECK(mk["requires_action"] == 1);
  auto sk = kinds(t["spans"]);
  CHECK(sk["client_wait"] == 1);
  CHECK(sk["tool"] == 0);
  for (const auto& s : t["spans"])
    if (s["kind"] == "client_wait") CHECK(s["end_ms"].is_null());
  REQUIRE(f.st->submit_tool_outputs(j.id, {{"call_aq0_0", "blue"}}).get() == store::write_status::ok);
  t = f.obs->timeline(*f.st->get_job(j.id));
  for (const auto& s : t["spans"])
    if (s["kind"] == "client_wait") CHECK(s["end_ms"].is_number_integer());
  CHECK(kinds(t["marks"])["tool_outputs"] == 1);
}

TEST_CASE("engine samples, latest families, job counts, prune") {
  fixture f;
  f.job();
  obs::engine_sample s;
  s.at_ms = 1000;
  s.tokens_per_s = 12.5;
  s.batch_size = 3;
  s.kv_blocks_total = 64;
  s.prefix_hit_rate = 0.25;
  REQUIRE(f.obs->write_sample("w1", s, json::array()));
  s.at_ms = 2000;
  REQUIRE(f.obs->write_sample("w1", s, json::array({{{"name", "agentq_x"}}})));
  s.at_ms = 1500;
  REQUIRE(f.obs->write_sample("w2", s, json::array()));
  auto all = f.obs->engine_stats(0, 3000);
  CHECK(all["object"] == "engine.stats");
  CHECK(all["now_ms"] == 3000);
  REQUIRE(all["workers"].size() == 2);
  CHECK(all["workers"][0]["worker_id"] == "w1");
  REQUIRE(all["workers"][0]["samples"].size() == 2);
  const json& first = all["workers"][0]["samples"][0];
  CHECK(first["at_ms"] == 1000);
  CHECK(first["tokens_per_s"] == 12.5);
  CHECK(first["batch_size"] == 3);
  CHECK(first["kv_blocks_total"] == 64);
  CHECK(first["prefix_hit_rate"] == 0.25);
  CHECK(f.obs->engine_stats(1000, 3000)["workers"][0]["samples"].size() == 1);  // since_ms is exclusive
  auto fams = f.obs->latest_families(1800);
  REQUIRE(fams.size() == 1);  // w2's last write is older
  CHECK(fams[0].worker_id == "w1");
  CHECK(fams[0].families[0]["name"] == "agentq_x");
  auto counts = f.obs->job_counts();
  REQUIRE(counts.size() == 1);
  CHECK(counts[0].status == "queued");
  CHECK(counts[0].n_jobs == 1);
  f.obs->prune(1800);
  auto kept = f.obs->engine_stats(0, 3000);
  REQUIRE(kept["workers"].size() == 1);
  CHECK(kept["workers"][0]["samples"].size() == 1);
}
