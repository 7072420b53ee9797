// Data-parallel replicas of one model (engine/replica_set.h) on the real tiny model: how many the
// config resolves to, golden outputs through two replicas (spread over both), a job on replica
// key % n and its next turn where its KV is however busy that replica, key-less requests to the
// least busy one, cancel by the interleaved request id, summed stats and a spill directory per replica.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <thread>

#include <unistd.h>

#include "golden.h"
#include "replica_set.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

engine_config replicas_config(int32_t n) {
  auto c = test::tiny_config();
  c.n_threads = 1;
  c.n_replicas = n;
  return c;
}

std::unique_ptr<engine> load(const engine_config& c) {
  std::string err;
  auto e = engine::load(c, &err);
  REQUIRE_MESSAGE(e, err);
  return e;
}

}  // namespace

TEST_CASE("replicas: the count a config resolves to") {
  auto c = test::tiny_config();
  c.n_replicas = 3;
  CHECK(resolve_replicas(c, 2) == 3);  // explicit: as given
  c.n_replicas = 0;                    // auto
  c.n_threads = 0;
  CHECK(resolve_replicas(c, 2) == 2);  // stories260K is under k_one_thread_model_bytes
  CHECK(resolve_replicas(c, 1) == 1);
  CHECK(resolve_replicas(c, 0) == 1);  // cores unknown
  CHECK(resolve_replicas(c, 16) == 2);
  c.n_threads = 2;                     // an explicit thread count: its ops on a pool, one engine
  CHECK(resolve_replicas(c, 2) == 1);
  c.n_threads = 0;
  c.device = "cuda";
  CHECK(resolve_replicas(c, 2) == 1);
  c.device = "cpu";
  c.draft_model_path = c.model_path;
  CHECK(resolve_replicas(c, 2) == 1);
  c.draft_model_path.clear();
  c.n_replicas = 1;
  CHECK(resolve_replicas(c, 8) == 1);  // the engine's default: one
  auto e = load(c);
  CHECK(e->model().n_replicas == 1);
}

TEST_CASE("replicas: two replicas give the golden outputs, spread over both, stats summed") {
  const auto goldens = test::load_golden();
  REQUIRE(!goldens.empty());
  auto e = load(replicas_config(2));
  CHECK(e->model().n_replicas == 2);
  auto one = load(replicas_config(1));
  // The budget split, not doubled (each half rounded down to whole blocks).
  CHECK(e->model().kv_capacity_tokens <= one->model().kv_capacity_tokens);
  CHECK(e->model().kv_capacity_tokens >= one->model().kv_capacity_tokens - 2 * 64);
  std::vector<token_result> out(goldens.size());
  std::vector<bool> done(goldens.size(), false);
  std::set<uint64_t> replicas_used;
  int64_t n_prompt = 0;
  for (size_t i = 0; i < goldens.size(); ++i) {
    n_prompt += int64_t(goldens[i].prompt_ids.size());
    const uint64_t id = e->submit(test::greedy(goldens[i].prompt_ids, 128, 100 + i), {nullptr, [&, i](token_result r) {
                                    out[i] = std::move(r);
                                    done[i] = true;
                                  }});
    CHECK(id != 0);
    replicas_used.insert(id % 2);
  }
  CHECK(replicas_used.size() == 2);  // keys 100.. spread by key % 2
  for (int guard = 0; guard < 100000 && !std::all_of(done.begin(), done.end(), [](bool b) { return b; }); ++guard)
    e->step();
  for (size_t i = 0; i < goldens.size(); ++i) {
    REQUIRE(done[i]);
    CHECK(out[i].output_ids == goldens[i].output_ids);
  }
  const engine_stats s = e->stats();
  CHECK(s.n_tokens_prompt == n_prompt);
  CHECK(s.n_running == 0);
  CHECK(s.healthy);
}

TEST_CASE("replicas: a job runs on replica key % n, its next turn where its KV is, however busy") {
  const auto g = test::load_golden();
  REQUIRE(g.size() >= 2);
  auto e = load(replicas_config(2));
  const uint64_t job = 42;  // replica 0
  token_result t1;
  {
    bool d = false;
    const uint64_t id1 = e->submit(test::greedy(g[0].prompt_ids, 20, job), {nullptr, [&](token_result r) { t1 = std::move(r), d = true; }});
    CHECK(id1 % 2 == job % 2);
    while (!d) e->step();
  }
  // Two more jobs on the same replica keep it busy; the other stays idle.
  int n_busy_done = 0;
  for (uint64_t k : {2, 4}) {
    token_request busy = test::greedy(g[1].prompt_ids, 200, k);
    busy.ignore_eos = true;
    CHECK(e->submit(std::move(busy), {nullptr, [&](token_result) { n_busy_done++; }}) % 2 == 0);
  }
  std::vector<token_id> prompt2 = g[0].prompt_ids;
  prompt2.insert(prompt2.end(), t1.output_ids.begin(), t1.output_ids.end());
  prompt2.insert(prompt2.end(), {13, 400, 401, 402});
  token_result t2;
  bool d2 = false;
  const uint64_t id2 = e->submit(test::greedy(prompt2, 10, job), {nullptr, [&](token_result r) { t2 = std::move(r), d2 = true; }});
  CHECK(id2 % 2 == 0);  // where its KV is, not the idle replica
  bool d3 = false;
  const uint64_t id3 = e->submit(test::greedy(g[1].prompt_ids, 5, 7001), {nullptr, [&](token_result) { d3 = true; }});
  CHECK(id3 % 2 == 1);
  // A request without a job key goes to the least busy replica.
  bool d4 = false;
  const uint64_t id4 = e->submit(test::greedy(g[1].prompt_ids, 5, 0), {nullptr, [&](token_result) { d4 = true; }});
  CHECK(id4 % 2 == 1);
  while (!d2 || !d3 || !d4 || n_busy_done < 2) e->step();
  // Its resident KV was found: only the appended tokens (and turn 1's last sampled one) computed.
  CHECK(t2.usage.n_tokens_cached >= int32_t(g[0].prompt_ids.size()));
  CHECK(t2.usage.n_tokens_computed <= 6);
  // Released; a later request of the same key runs on the same replica again (whose prefix cache
  // still holds the released blocks).
  e->release(job);
  bool d5 = false;
  token_result t5;
  const uint64_t id5 = e->submit(test::greedy(prompt2, 5, job), {nullptr, [&](token_result r) { t5 = std::move(r), d5 = true; }});
  CHECK(id5 % 2 == 0);
  while (!d5) e->step();
  CHECK(t5.usage.n_tokens_cached > 0);
}

TEST_CASE("replicas: cancel reaches the replica that runs the request; loop threads; spill directories") {
  const auto g = test::load_golden();
  REQUIRE(!g.empty());
  auto c = replicas_config(2);
  const fs::path dir = fs::temp_directory_path() / ("agentq-replicas-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  c.spill_dir = dir.string();
  auto e = load(c);
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_directory(dir / "replica-1"));  // each replica's spill index its own
  e->start();
  std::atomic<int> n_cancelled{0}, n_done{0};
  std::vector<uint64_t> ids;
  for (uint64_t k = 1; k <= 4; ++k) {
    token_request r = test::greedy(g[0].prompt_ids, 1500, k);
    r.ignore_eos = true;
    ids.push_back(e->submit(std::move(r), {nullptr, [&](token_result res) {
                                             if (res.finish == finish_reason::cancelled) n_cancelled++;
                                             n_done++;
                                           }}));
  }
  std::set<uint64_t> used;
  for (uint64_t id : ids) used.insert(id % 2);
  CHECK(used.size() == 2);
  for (uint64_t id : ids) e->cancel(id);
  for (int i = 0; i < 2000 && n_done < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(n_done == 4);
  CHECK(n_cancelled == 4);
  e->stop();
  e.reset();
  fs::remove_all(dir);
}
