// KV that survives restarts (issue 31; docs/kv_and_batching.md "Restarts and deploys"): a job
// waits in requires_action, its worker goes (SIGTERM: the shutdown spill; SIGKILL: after the
// early spill) and comes back on the same data dir; the resumed turn restores the KV from disk,
// computes only the new tokens, and answers token for token what a run without the restart
// answers (greedy). A corrupted spill file is detected, counted, and the turn recomputes.
#include <doctest/doctest.h>

#include <fstream>
#include <thread>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

enum class restart { none, sigterm, sigkill_after_early_spill, corrupt_then_sigterm };

struct outcome {
  std::string id, status, turn2_content;
  json turn1_usage, turn2_usage;
};

json client_tool_job(test::cluster& c, const std::string& marker) {
  json body = test::tool_job(c.tool_url(), c.webhook_url(), marker);
  body["tools"][0].erase("execution");  // client-side: the job waits in requires_action
  return body;
}

std::vector<fs::path> spill_files(test::cluster& c) {
  std::vector<fs::path> out;
  std::error_code ec;
  // NOTE: recursive: with engine replicas (the default for this model), replica r > 0 spills into kv/replica-r.
  for (const auto& e : fs::recursive_directory_iterator(c.data_dir() / "kv", ec))
    if (e.path().extension() == ".kv") out.push_back(e.path());
  return out;
}

// Flip one payload byte of every spill file (the checksum must catch it).
void corrupt_spill_files(test::cluster& c) {
  for (const auto& p : spill_files(c)) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-40, std::ios::end);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(-40, std::ios::end);
    ch = char(ch ^ 0x20);
    f.write(&ch, 1);
  }
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

outcome run(test::cluster& c, const std::string& marker, restart how) {
  auto id = c.client().submit(client_tool_job(c, marker));
  REQUIRE(id);
  outcome out;
  out.id = *id;
  json job;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        job = c.client().get_job(*id);
                        const std::string st = job.value("status", "");
                        return st == "requires_action" || test::is_terminal_status(st);
                      },
                      60s),
                  c.logs_tail());
  REQUIRE_MESSAGE(job.value("status", "") == "requires_action", job.dump() << c.logs_tail());
  const std::string call_id = job["required_action"]["tool_calls"][0]["id"];
  auto& w = c.worker(0);
  switch (how) {
    case restart::none: break;
    case restart::sigterm:
    case restart::corrupt_then_sigterm: {
      CHECK(spill_files(c).empty());  // --spill-after-s is long here: the shutdown spill writes it
      CHECK(w.terminate() == 0);
      const std::string log = w.log_text();
      CHECK_MESSAGE(log.find("shutdown spill: 1 sequence(s) on disk (1 written now)") != std::string::npos, log);
      REQUIRE(spill_files(c).size() == 1);
      if (how == restart::corrupt_then_sigterm) corrupt_spill_files(c);
      c.start_worker(0);
      break;
    }
    case restart::sigkill_after_early_spill:
      // the early spill (--spill-after-s) writes the file while the KV stays pinned
      REQUIRE_MESSAGE(wait_until([&] { return spill_files(c).size() == 1; }, 20s), c.logs_tail());
      w.kill9();
      c.start_worker(0);
      break;
  }
  // NOTE: the old worker's id counts as alive for a few heartbeats; the continuation may be
  // routed to it and then reclaimed, which the short cluster timings keep to about a second.
  auto x = c.client().call("POST", "/v1/jobs/" + *id + "/tool_outputs",
                           json{{"tool_outputs", {{{"tool_call_id", call_id}, {"output", "sunny, 21 C"}}}}}.dump());
  REQUIRE_MESSAGE(x.status / 100 == 2, x.response);
  REQUIRE_MESSAGE(c.wait_terminal({*id}, 60s), c.logs_tail());
  job = c.client().get_job(*id);
  out.status = job.value("status", "");
  REQUIRE(job["turns"].size() >= 2);
  out.turn1_usage = job["turns"][0]["usage"];
  out.turn2_usage = job["turns"][1]["usage"];
  out.turn2_content = job["turns"][1].value("content", "");
  return out;
}

// Prompt tokens a turn computed (the job view reports prompt and cached tokens).
int computed(const json& usage) { return usage["prompt_tokens"].get<int>() - usage["cached_tokens"].get<int>(); }

// The "new tokens" of the resumed turn: its prompt after everything the job's KV holds,
// prompt2 - (prompt1 + completion1). NOTE: this holds because the next turn's prompt keeps the
// token ids the model sampled (tokenizer/splice.h) and the transcript renders the committed call
// as the model wrote it; before, the re-tokenized call shared only part of the KV.
int new_tokens(const outcome& o) {
  return o.turn2_usage["prompt_tokens"].get<int>() -
         (o.turn1_usage["prompt_tokens"].get<int>() + o.turn1_usage["completion_tokens"].get<int>());
}

// The job's KV marks, once the last is a kv_restore. NOTE: the worker's housekeeper writes them
// (service/worker/kv_marks.cpp) on its next tick, so the last turn's kv_restore may land just
// after the job turns terminal; wait up to 10 s for it instead of reading once.
std::vector<std::vector<std::string>> kv_marks(test::cluster& c, const std::string& id) {
  std::vector<std::vector<std::string>> marks;
  for (int i = 0; i < 100; ++i) {
    marks = test::query_db(
        c, "SELECT kind, attrs FROM job_timeline WHERE job_id=? AND kind IN ('kv_spill','kv_restore') ORDER BY id", {id});
    if (!marks.empty() && marks.back()[0] == "kv_restore") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return marks;
}

constexpr int k_block = 64;  // engine_config::block_size

test::cluster_options options(const std::string& spill_after_s) {
  test::cluster_options o;
  o.n_workers = 1;
  o.worker_args = {"--spill-after-s", spill_after_s, "--shutdown-spill-s", "10", "--kv-spill-min-tokens", "16"};
  return o;
}

}  // namespace

TEST_CASE("requires_action -> SIGTERM -> restart -> tool outputs: restored from disk, only new tokens computed") {
  test::cluster c(options("600"));
  const outcome ref = run(c, "kv-restart-reference", restart::none);
  const outcome r = run(c, "kv-restart-sigterm", restart::sigterm);
  MESSAGE("reference turn 2 " << ref.turn2_usage.dump() << "\nrestarted turn 2 " << r.turn2_usage.dump());
  CHECK(r.status == ref.status);
  CHECK(test::is_terminal_status(r.status));
  CHECK(r.turn2_content == ref.turn2_content);  // greedy: token-identical
  CHECK(r.turn2_usage["completion_tokens"] == ref.turn2_usage["completion_tokens"]);
  CHECK(r.turn2_usage["cached_tokens"].get<int>() > 0);
  CHECK(new_tokens(r) > 0);
  CHECK(computed(r.turn2_usage) <= new_tokens(r) + k_block);
  CHECK(computed(ref.turn2_usage) <= new_tokens(ref) + k_block);
  const auto marks = kv_marks(c, r.id);
  std::string kinds;
  for (const auto& m : marks) kinds += m[0] + " " + m[1] + "\n";
  MESSAGE("timeline KV marks:\n" << kinds);
  REQUIRE(marks.size() >= 2);
  CHECK(marks.front()[0] == "kv_spill");
  CHECK(marks.back()[0] == "kv_restore");
  const json restored = json::parse(marks.back()[1]);
  CHECK(restored["tokens"].get<int>() == r.turn2_usage["cached_tokens"].get<int>());
  CHECK(restored["bytes"].get<int64_t>() > 0);
  CHECK(restored.contains("ms"));
  CHECK(spill_files(c).empty());  // restored (and the job is over): no file left
  CHECK(c.drain(30s));
  auto h = test::check_history(c, "kv-restart-sigterm");
  CHECK_MESSAGE(h.ok(), h.summary());
}

TEST_CASE("requires_action -> early spill -> SIGKILL -> restart: restored, only new tokens computed") {
  test::cluster c(options("0.3"));
  const outcome ref = run(c, "kv-early-reference", restart::none);
  const outcome r = run(c, "kv-early-sigkill", restart::sigkill_after_early_spill);
  MESSAGE("reference turn 2 " << ref.turn2_usage.dump() << "\nkilled turn 2 " << r.turn2_usage.dump());
  CHECK(test::is_terminal_status(r.status));
  CHECK(r.turn2_content == ref.turn2_content);
  CHECK(r.turn2_usage["cached_tokens"].get<int>() > 0);
  CHECK(new_tokens(r) > 0);
  CHECK(computed(r.turn2_usage) <= new_tokens(r) + k_block);
  CHECK(computed(ref.turn2_usage) <= new_tokens(ref) + k_block);
  const auto marks = kv_marks(c, r.id);
  REQUIRE(!marks.empty());
  CHECK(marks.back()[0] == "kv_restore");
  CHECK(spill_files(c).empty());
  CHECK(c.drain(30s));
}

TEST_CASE("a corrupted spill file: detected, counted, the turn recomputes and completes") {
  test::cluster c(options("600"));
  const outcome ref = run(c, "kv-corrupt-reference", restart::none);
  const outcome r = run(c, "kv-corrupt", restart::corrupt_then_sigterm);
  MESSAGE("reference turn 2 " << ref.turn2_usage.dump() << "\ncorrupted turn 2 " << r.turn2_usage.dump());
  CHECK(r.status == ref.status);
  CHECK(r.turn2_content == ref.turn2_content);
  // nothing restored: the whole prompt is computed again (the prefix cache is empty after the restart)
  CHECK(r.turn2_usage["cached_tokens"].get<int>() == 0);
  CHECK(computed(r.turn2_usage) == r.turn2_usage["prompt_tokens"].get<int>());
  const std::string log = c.worker(0).log_text();
  CHECK_MESSAGE(log.find("1 KV spill file(s) failed the checksum and were recomputed") != std::string::npos, log);
  CHECK(spill_files(c).empty());  // the bad file is gone
  CHECK(c.drain(30s));
}
