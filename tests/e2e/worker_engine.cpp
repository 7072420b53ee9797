// The worker on the real engine with the shared tiny model (stories260K): a job runs through
// SQLite + Redis + engine to a terminal state with transcript and usage; with tool calling
// (tool_choice required/named, constrained by the engine) a server-side tool loop and a client-side
// tool round trip that resumes on resident KV; a client tool wait long enough to spill the job's
// KV to disk puts kv_spill / kv_restore marks on its timeline. A forced turn without a call fails;
// exit code 77 when the model file is absent.
#include <doctest/doctest.h>

#include <agentq/engine.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "obs/obs_store.h"
#include "queue/queue.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"
#include "test_env.h"
#include "tool_server.h"
#include "worker/worker.h"

using namespace agentq;
using json = nlohmann::json;
using store::job_status;

namespace {

struct rig {
  test::temp_dir dir;
  test::redis_server redis;
  std::unique_ptr<store::store> db;
  std::unique_ptr<queue::queue> q;
  std::unique_ptr<obs::obs_store> obs;  // job timelines
  std::shared_ptr<engine> eng;
  std::unique_ptr<worker::worker> w;

  explicit rig(std::shared_ptr<engine> e, std::function<void(worker::worker_options&)> tweak = {})
      : eng(std::move(e)) {
    std::string err;
    store::store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    queue::queue_options qo;
    qo.redis.port = redis.port();
    q = std::make_unique<queue::queue>(qo, *db);
    q->start_relay();
    obs = obs::obs_store::open(so.path, &err);
    REQUIRE_MESSAGE(obs, err);
    worker::worker_options wo;
    wo.worker_id = "gpu0";
    wo.tool_allow_cidrs = "127.0.0.0/8";
    wo.timeline = obs.get();
    if (tweak) tweak(wo);
    w = std::make_unique<worker::worker>(wo, eng, *db, *q);
    w->start();
  }
  ~rig() {
    w.reset();
    q->stop_relay();
  }
  std::string submit(const json& request) {
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = request.dump();
    return db->create_job(nj).get().job.id;
  }
  store::job_row wait_for(const std::string& id, std::function<bool(job_status)> pred, int timeout_ms = 30000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      auto j = db->get_job(id);
      REQUIRE(j);
      if (pred(j->status) || std::chrono::steady_clock::now() > until) return *j;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

std::shared_ptr<engine> load_tiny(const std::string& spill_dir = {}) {
  engine_config cfg;
  cfg.model_path = test::tiny_model().string();
  cfg.n_threads = 2;
  cfg.kv_budget_bytes = 64ull << 20;
  cfg.spill_dir = spill_dir;
  cfg.kv_spill_min_tokens = 8;  // the tiny model's short prompts still spill
  std::string err;
  auto e = worker::load_engine(cfg, &err);
  if (!e) MESSAGE("engine::load: " << err);
  return e;
}

json tool_def_json(const std::string& name, const std::string& url = {}) {
  json t = {{"type", "function"},
            {"function",
             {{"name", name},
              // NOTE: an enum keeps the tiny model's constrained call short (a free string can run on).
              {"parameters",
               {{"type", "object"}, {"properties", {{"q", {{"enum", {"Paris", "London"}}}}}}, {"required", {"q"}}}}}}};
  if (!url.empty()) t["execution"] = {{"type", "http"}, {"url", url}, {"timeout_ms", 5000}};
  return t;
}

bool tools_supported(engine& e) {
  turn_request r;
  r.messages.push_back(chat_message{role::user, "hi"});
  r.tools.push_back(tool_def{"look", "", R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"]})"});
  r.choice.mode = tool_choice_mode::required;
  auto err = e.validate(r);
  if (err) MESSAGE("tool calling unavailable in this engine build: " << *err);
  return !err;
}

// Turn 0 of a job called a tool (tool_choice required/named); a turn without a call is reported
// (the engine constrains a forced turn to a call, so that is a failure, not a skip).
bool first_turn_called_tool(store::store& db, const std::string& id) {
  for (auto& r : db.read_transcript(id))
    if (r.role == "assistant" && r.turn_idx == 0) {
      if (!r.tool_calls_json.empty()) return true;
      MESSAGE("engine produced no tool call under a forced tool_choice; output: " << r.content);
      return false;
    }
  return false;
}

}  // namespace

TEST_CASE("real engine: jobs run to completion with transcript and usage") {
  test::require_tiny_model();
  auto eng = load_tiny();
  REQUIRE(eng);
  bool with_tools = tools_supported(*eng);
  rig R(eng);

  SUBCASE("plain job, several at once") {
    std::vector<std::string> ids;
    for (int i = 0; i < 4; ++i)
      ids.push_back(R.submit({{"messages", {{{"role", "user"}, {"content", "Once upon a time " + std::to_string(i)}}}},
                              {"max_tokens_per_turn", 24}}));
    for (auto& id : ids) {
      auto j = R.wait_for(id, [](job_status s) { return store::is_terminal(s); });
      CHECK((j.status == job_status::completed || j.status == job_status::incomplete));
      auto u = store::usage_totals::from_json(j.usage_json);
      CHECK(u.turns == 1);
      CHECK(u.prompt_tokens > 0);
      CHECK(u.completion_tokens > 0);
      CHECK(u.completion_tokens <= 24);
      auto tr = R.db->read_transcript(id);
      REQUIRE(tr.size() == 2);
      CHECK(tr[1].role == "assistant");
      CHECK(json::parse(j.result_json)["content"] == tr[1].content);
    }
  }

  SUBCASE("server-side tool loop (tool_choice required)") {
    REQUIRE_MESSAGE(with_tools, "this engine build refuses tool calling on the tiny model");
    test::tool_server tools([](const test::tool_server::request&) { return std::pair{200, std::string(R"({"output":"sunny"})")}; });
    std::string id = R.submit({{"messages", {{{"role", "user"}, {"content", "weather?"}}}},
                               {"tools", {tool_def_json("look", tools.url())}},
                               {"tool_choice", "required"},
                               {"max_tokens_per_turn", 400}, {"parallel_tool_calls", false},
                               {"max_turns", 3}});
    auto j = R.wait_for(id, [](job_status s) { return store::is_terminal(s); });
    CHECK((j.status == job_status::completed || j.status == job_status::incomplete));
    for (auto& r : R.db->read_transcript(id))
      MESSAGE(r.role << " turn " << r.turn_idx << ": " << r.content << " " << r.tool_calls_json << " " << r.usage_json);
    MESSAGE("status " << std::string(store::to_string(j.status)) << " error: " << j.error);
    REQUIRE(first_turn_called_tool(*R.db, id));
    CHECK(tools.requests().size() >= 1);
    auto u = store::usage_totals::from_json(j.usage_json);
    CHECK(u.turns >= 2);
    CHECK(u.cached_tokens > 0);
  }

  SUBCASE("client-side tool: requires_action, outputs, resume on resident KV") {
    REQUIRE_MESSAGE(with_tools, "this engine build refuses tool calling on the tiny model");
    std::string id = R.submit({{"messages", {{{"role", "user"}, {"content", "ask me"}}}},
                               {"tools", {tool_def_json("ask")}},
                               {"tool_choice", {{"type", "function"}, {"function", {{"name", "ask"}}}}},
                               {"max_tokens_per_turn", 400}, {"parallel_tool_calls", false}});
    auto j = R.wait_for(id, [](job_status s) { return s == job_status::requires_action || store::is_terminal(s); });
    for (auto& r : R.db->read_transcript(id))
      MESSAGE(r.role << " turn " << r.turn_idx << ": " << r.content << " " << r.tool_calls_json << " " << r.usage_json);
    MESSAGE("status " << std::string(store::to_string(j.status)) << " error: " << j.error);
    REQUIRE(first_turn_called_tool(*R.db, id));
    REQUIRE(j.status == job_status::requires_action);
    auto pending = json::parse(j.pending_json);
    REQUIRE(pending.size() >= 1);
    std::vector<store::tool_output> outs;
    for (auto& p : pending) outs.push_back({p["id"], "blue"});
    CHECK(R.db->submit_tool_outputs(id, outs).get() == store::write_status::ok);
    j = R.wait_for(id, [](job_status s) { return store::is_terminal(s); });
    CHECK((j.status == job_status::completed || j.status == job_status::incomplete));
    auto tr = R.db->read_transcript(id);
    json turn2;
    for (auto& r : tr)
      if (r.role == "assistant" && r.turn_idx == 1) turn2 = json::parse(r.usage_json);
    REQUIRE(turn2.is_object());
    MESSAGE("resumed turn: prompt " << turn2["prompt_tokens"] << ", cached " << turn2["cached_tokens"] << ", computed "
                                    << turn2["computed_tokens"]);
    CHECK(turn2["cached_tokens"].get<int>() > 0);
    CHECK(turn2["computed_tokens"].get<int>() < turn2["prompt_tokens"].get<int>());
  }
}

// marks of one kind on the job's timeline
std::vector<json> marks_of(rig& R, const std::string& id, const std::string& kind) {
  std::vector<json> out;
  auto job = R.db->get_job(id);
  REQUIRE(job);
  const json timeline = R.obs->timeline(*job);  // NOTE: a named value: range-for over a temporary's member dangles
  for (auto& m : timeline["marks"])
    if (m["kind"] == kind) out.push_back(m);
  return out;
}

TEST_CASE("real engine: a long client-tool wait spills the KV; the timeline marks the spill and the restore") {
  test::require_tiny_model();
  test::temp_dir spill;
  auto eng = load_tiny(spill.path().string());
  REQUIRE(eng);
  REQUIRE_MESSAGE(tools_supported(*eng), "this engine build refuses tool calling on the tiny model");
  rig R(eng, [](worker::worker_options& wo) { wo.client_tool_park_s = 3600; });  // past every pin limit: spilled
  std::string id = R.submit({{"messages", {{{"role", "user"}, {"content", "ask me"}}}},
                             {"tools", {tool_def_json("ask")}},
                             {"tool_choice", {{"type", "function"}, {"function", {{"name", "ask"}}}}},
                             {"max_tokens_per_turn", 400}, {"parallel_tool_calls", false}});
  auto j = R.wait_for(id, [](job_status s) { return s == job_status::requires_action || store::is_terminal(s); });
  REQUIRE(first_turn_called_tool(*R.db, id));
  REQUIRE(j.status == job_status::requires_action);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (marks_of(R, id, "kv_spill").empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto spills = marks_of(R, id, "kv_spill");
  INFO("engine spills " << eng->stats().n_spills);
  REQUIRE(spills.size() == 1);
  INFO("spill: " << spills[0].dump());
  CHECK(spills[0]["attrs"]["tokens"].get<int>() > 0);
  CHECK(spills[0]["attrs"]["bytes"].get<int64_t>() > 0);
  CHECK(spills[0]["attrs"]["ms"].get<double>() >= 0);
  CHECK(spills[0]["attrs"]["worker"] == "gpu0");
  CHECK(eng->stats().n_spills == 1);

  std::vector<store::tool_output> outs;
  for (auto& p : json::parse(j.pending_json)) outs.push_back({p["id"], "blue"});
  REQUIRE(R.db->submit_tool_outputs(id, outs).get() == store::write_status::ok);
  j = R.wait_for(id, [](job_status s) { return store::is_terminal(s); });
  CHECK((j.status == job_status::completed || j.status == job_status::incomplete));
  until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (marks_of(R, id, "kv_restore").empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto restores = marks_of(R, id, "kv_restore");
  REQUIRE(restores.size() == 1);
  INFO("restore: " << restores[0].dump());
  CHECK(eng->stats().n_restores == 1);
  CHECK(restores[0]["attrs"]["tokens"].get<int>() > 0);
  CHECK(restores[0]["attrs"]["tokens"].get<int>() <= spills[0]["attrs"]["tokens"].get<int>());
  CHECK(restores[0]["attrs"]["bytes"].get<int64_t>() > 0);
  CHECK(restores[0]["at_ms"].get<int64_t>() >= spills[0]["at_ms"].get<int64_t>());
  MESSAGE("kv_spill " << spills[0]["label"] << "; kv_restore " << restores[0]["label"]);
}
