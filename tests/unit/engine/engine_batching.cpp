// The engine end to end on the real tiny model (stories260K): golden greedy outputs,
// solo vs batched identical token for token, chunked vs unchunked prefill, a second turn
// computing only its appended tokens, shared prefixes across jobs, a tiny pool with many
// sequences, spill -> restore (and a corrupted spill file), cancel, the loop thread, turns.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>

#include <unistd.h>

#include "engine_impl.h"
#include "golden.h"
#include "grammar/constraint.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

using test::golden;
using test::greedy;
using test::run_all;
using test::run_one;
using test::tiny_config;

std::unique_ptr<engine_impl> load(const engine_config& c) { return test::load_as<engine_impl>(c); }

// The shared goldens; fails the test when there are none (a missing or empty file must not pass unchecked).
std::vector<golden> load_golden() {
  auto g = test::load_golden();
  REQUIRE_MESSAGE(!g.empty(), "no golden outputs in ", (test::shared_dir() / "golden" / "stories260K.greedy.jsonl").string());
  return g;
}

// Distinct prompts: golden prompts with varied tails.
std::vector<token_id> prompt_n(const std::vector<golden>& g, int i) {
  auto p = g[size_t(i) % g.size()].prompt_ids;
  for (int k = 0; k < i / int(g.size()); ++k) p.push_back(token_id(300 + (i * 7 + k * 13) % 150));
  return p;
}
fs::path temp_dir(const char* name) {
  auto d = fs::temp_directory_path() / (std::string("agentq-eng-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("engine: golden greedy outputs of the tiny model") {
  auto e = load(tiny_config());
  CHECK(e->model().n_vocab == 512);
  MESSAGE("n_ctx " << e->model().n_ctx << ", blocks " << e->pool().n_blocks_total());
  const auto goldens = load_golden();
  MESSAGE(goldens.size() << " golden prompts");
  for (const auto& g : goldens) {
    auto r = run_one(*e, greedy(g.prompt_ids, 128));
    CHECK(r.output_ids == g.output_ids);
    CHECK(r.usage.n_tokens_prompt == int32_t(g.prompt_ids.size()));
  }
  CHECK(e->stats().n_running == 0);
}

// n_threads 0 ("one per core") runs a model under k_one_thread_model_bytes on one thread (model.h);
// tiny_config's explicit 2 keeps the pool path above. Both must give the goldens, batched too.
TEST_CASE("engine: threads 'one per core' (the tiny model: one thread) gives the golden outputs, batched") {
  auto c = tiny_config();
  c.n_threads = 0;
  auto e = load(c);
  const auto goldens = load_golden();
  std::vector<token_request> reqs;
  for (size_t i = 0; i < goldens.size(); ++i) reqs.push_back(greedy(goldens[i].prompt_ids, 128, i + 1));
  auto rs = run_all(*e, reqs);
  REQUIRE(rs.size() == goldens.size());
  for (size_t i = 0; i < goldens.size(); ++i) CHECK(rs[i].output_ids == goldens[i].output_ids);
}

TEST_CASE("engine: solo vs batched (1, 4, 16) and chunked vs unchunked prefill are identical") {
  const auto g = load_golden();
  auto e = load(tiny_config());
  std::vector<std::vector<token_id>> solo;
  for (int i = 0; i < 16; ++i) solo.push_back(run_one(*e, greedy(prompt_n(g, i), 40)).output_ids);
  for (int n : {1, 4, 16}) {
    auto fresh = load(tiny_config());
    std::vector<token_request> reqs;
    for (int i = 0; i < n; ++i) reqs.push_back(greedy(prompt_n(g, i), 40));
    auto res = run_all(*fresh, reqs);
    for (int i = 0; i < n; ++i) CHECK_MESSAGE(res[size_t(i)].output_ids == solo[size_t(i)], "batch " << n << " seq " << i);
  }
  // chunked prefill: a long prompt in chunks of 7 tokens, next to decoding neighbours
  auto cfg = tiny_config();
  cfg.max_step_tokens = 7;
  auto chunked = load(cfg);
  std::vector<token_id> long_prompt = g[4].prompt_ids;
  for (int i = 0; i < 60; ++i) long_prompt.push_back(token_id(300 + i * 3 % 200));
  auto want = run_one(*load(tiny_config()), greedy(long_prompt, 30)).output_ids;
  std::vector<token_request> reqs = {greedy(prompt_n(g, 0), 40), greedy(long_prompt, 30), greedy(prompt_n(g, 1), 40)};
  auto res = run_all(*chunked, reqs);
  CHECK(res[1].output_ids == want);
  CHECK(res[0].output_ids == solo[0]);
  CHECK(res[2].output_ids == solo[1]);
}

TEST_CASE("engine: a second turn computes only its appended tokens and equals a from-scratch run") {
  const auto g = load_golden();
  auto e = load(tiny_config());
  auto [t1, t2, prompt2, n_appended] = test::run_two_turns(*e, g[0].prompt_ids);
  CHECK(t1.usage.n_tokens_computed == int32_t(g[0].prompt_ids.size()));
  CHECK(t2.usage.n_tokens_prompt == int32_t(prompt2.size()));
  CHECK(t2.usage.n_tokens_computed <= n_appended + 1);  // + the last sampled token of turn 1
  CHECK(t2.usage.n_tokens_cached + t2.usage.n_tokens_computed == t2.usage.n_tokens_prompt);
  auto cfg = tiny_config();
  cfg.prefix_reuse = false;
  auto scratch = load(cfg);
  auto want = run_one(*scratch, greedy(prompt2, 40, 42));
  CHECK(want.usage.n_tokens_computed == int32_t(prompt2.size()));
  CHECK(t2.output_ids == want.output_ids);
  e->release(42);
  e->step();
  CHECK(e->stats().n_blocks_parked == 0);
}

TEST_CASE("engine: two jobs sharing a long prefix — the second computes at most one block of it") {
  auto e = load(tiny_config());
  const int32_t n_ctx = e->model().n_ctx;
  // NOTE: stories260K declares a 2048-token context (trained on 512): a 1k-token shared prefix fits
  // (RoPE past 512 is out of its training range, which does not matter for a KV-reuse test).
  std::vector<token_id> shared = {1};
  for (int i = 1; i < 1000; ++i) shared.push_back(token_id(260 + (i * 37) % 240));
  REQUIRE(int32_t(shared.size()) + 20 < n_ctx);
  auto a = shared; a.insert(a.end(), {300, 301, 302});
  auto b = shared; b.insert(b.end(), {310, 311});
  auto ra = run_one(*e, greedy(a, 8, 1));
  auto rb = run_one(*e, greedy(b, 8, 2));
  MESSAGE("job 2: prompt " << rb.usage.n_tokens_prompt << ", cached " << rb.usage.n_tokens_cached << ", computed "
                           << rb.usage.n_tokens_computed);
  CHECK(rb.usage.n_tokens_computed <= e->pool().block_size() + 2);
  auto cfg = tiny_config();
  cfg.prefix_reuse = false;
  CHECK(rb.output_ids == run_one(*load(cfg), greedy(b, 8)).output_ids);
  (void)ra;
}

TEST_CASE("engine: tiny pool, many sequences — all finish correctly, invariants hold") {
  const auto g = load_golden();
  auto ref = load(tiny_config());
  std::vector<std::vector<token_id>> solo;
  for (int i = 0; i < 24; ++i) solo.push_back(run_one(*ref, greedy(prompt_n(g, i), 48)).output_ids);
  auto cfg = tiny_config();
  // room for ~3 sequences' worth of blocks
  cfg.block_size = 8;
  {
    auto probe = load(cfg);
    cfg.kv_budget_bytes = uint64_t(probe->pool().layout().block_bytes()) * 24;
  }
  cfg.max_step_tokens = 32;
  auto e = load(cfg);
  CHECK(e->pool().n_blocks_total() == 24);
  std::vector<token_request> reqs;
  for (int i = 0; i < 24; ++i) reqs.push_back(greedy(prompt_n(g, i), 48, uint64_t(i + 1)));
  auto res = run_all(*e, reqs);
  for (int i = 0; i < 24; ++i) {
    CHECK_MESSAGE(res[size_t(i)].output_ids == solo[size_t(i)], "seq " << i);
    CHECK(res[size_t(i)].finish == finish_reason::length);
  }
  e->sanity();
}

TEST_CASE("engine: spill -> restore gives identical continuations; a corrupted file is recomputed") {
  const auto g = load_golden();
  const auto dir = temp_dir("spill");
  auto cfg = tiny_config();
  cfg.spill_dir = dir.string();
  std::vector<token_id> p1 = g[4].prompt_ids;
  for (int i = 0; i < 80; ++i) p1.push_back(token_id(300 + (i * 11) % 200));
  auto scratch_cfg = tiny_config();
  scratch_cfg.prefix_reuse = false;
  auto scratch = load(scratch_cfg);

  for (int variant = 0; variant < 3; ++variant) {  // 0: restore, 1: corrupted, 2: across a restart
    auto e = load(cfg);
    std::vector<kv_move_event> moves;  // engine thread == this thread (step())
    e->on_kv_move([&](const kv_move_event& m) { moves.push_back(m); });
    auto t1 = run_one(*e, greedy(p1, 20, 7));
    e->park(7, 3600.0);  // a long wait: spilled
    e->step();
    CHECK(e->stats().n_spills == 1);
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].what == kv_move_event::kind::spill);
    CHECK(moves[0].job_key == 7);
    CHECK(moves[0].n_tokens >= int32_t(p1.size()));
    CHECK(moves[0].n_bytes > 0);
    CHECK(moves[0].ms >= 0);
    CHECK(e->stats().n_blocks_parked == 0);
    CHECK(e->stats().n_blocks_spilled > 0);
    auto p2 = p1;
    p2.insert(p2.end(), t1.output_ids.begin(), t1.output_ids.end());
    p2.insert(p2.end(), {13, 350, 351, 352});
    if (variant == 1) {
      int n = 0;
      for (const auto& f : fs::directory_iterator(dir)) {
        std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
        s.seekp(200);
        s.put('\x7f');
        ++n;
      }
      CHECK(n == 1);
    }
    if (variant == 2) {
      e.reset();
      e = load(cfg);  // the index is rebuilt from the files
      CHECK(e->stats().n_blocks_spilled > 0);
      e->on_kv_move([&](const kv_move_event& m) { moves.push_back(m); });
    }
    auto t2 = run_one(*e, greedy(p2, 20, 7));
    MESSAGE("variant " << variant << ": cached " << t2.usage.n_tokens_cached << ", computed " << t2.usage.n_tokens_computed);
    CHECK(t2.output_ids == run_one(*scratch, greedy(p2, 20)).output_ids);
    if (variant == 1) {
      CHECK(e->stats().n_restores == 0);
      CHECK(e->resident().spill()->n_corrupt() == 1);
    } else {
      CHECK(e->stats().n_restores == 1);
      CHECK(t2.usage.n_tokens_computed <= 5);
      REQUIRE(moves.size() == 2);
      CHECK(moves[1].what == kv_move_event::kind::restore);
      CHECK(moves[1].job_key == 7);
      CHECK(moves[1].n_tokens == t2.usage.n_tokens_cached);
      CHECK(moves[1].n_bytes == moves[0].n_bytes / moves[0].n_tokens * moves[1].n_tokens);
    }
    e->release(7);
    e->step();
    fs::remove_all(dir);
  }
}

TEST_CASE("engine: cancel within one step frees the KV; finish reasons; stop strings") {
  const auto g = load_golden();
  auto e = load(tiny_config());
  bool done = false;
  token_result res;
  const uint64_t id = e->submit(greedy(g[0].prompt_ids, 500), {nullptr, [&](token_result r) { res = r; done = true; }});
  for (int i = 0; i < 5; ++i) e->step();
  CHECK(e->stats().n_running == 1);
  e->cancel(id);
  e->step();
  CHECK(done);
  CHECK(res.finish == finish_reason::cancelled);
  CHECK(e->stats().n_running == 0);
  CHECK(e->stats().n_blocks_parked == 0);
  // stop string: cut where it starts, not included
  auto full = run_one(*e, greedy(g[0].prompt_ids, 60));
  REQUIRE(full.text.size() > 20);
  const std::string stop = full.text.substr(15, 4);
  auto r = greedy(g[0].prompt_ids, 60);
  r.stop = {stop};
  std::string streamed;
  bool fin = false;
  token_result sres;
  e->submit(r, {[&](std::string_view p) { streamed += p; }, [&](token_result x) { sres = x; fin = true; }});
  while (!fin) e->step();
  CHECK(sres.finish == finish_reason::stop);
  CHECK(sres.text == full.text.substr(0, full.text.find(stop)));
  CHECK(streamed == sres.text);
  CHECK(std::string(to_string(finish_reason::tool_calls)) == "tool_calls");
  // a prompt that can never fit fails at once
  auto big = greedy(std::vector<token_id>(size_t(e->model().n_ctx) + 1, 300), 4);
  auto br = run_one(*e, big);
  CHECK(br.finish == finish_reason::error);
  CHECK_FALSE(br.error.empty());
}

TEST_CASE("engine: own loop thread; thread-safe submit; turn requests end to end") {
  const auto g = load_golden();
  auto e = load(tiny_config());
  e->start();
  std::vector<std::promise<token_result>> ps(8);
  for (int i = 0; i < 8; ++i) e->submit(greedy(g[size_t(i) % g.size()].prompt_ids, 128), {nullptr, [&ps, i](token_result r) { ps[size_t(i)].set_value(r); }});
  for (int i = 0; i < 8; ++i) {
    auto r = ps[size_t(i)].get_future().get();
    CHECK(r.output_ids == g[size_t(i) % g.size()].output_ids);
  }
  turn_request t;
  t.job_key = 5;
  t.messages = {{role::system, "You tell short stories.", {}, "", ""}, {role::user, "Tell me about a dog.", {}, "", ""}};
  t.max_tokens = 24;
  std::promise<turn_result> tp;
  std::string streamed;
  e->submit(t, {[&](std::string_view p) { streamed += p; }, [&](turn_result r) { tp.set_value(r); }});
  auto tr = tp.get_future().get();
  CHECK(tr.finish != finish_reason::error);
  CHECK(tr.message.role == role::assistant);
  CHECK(tr.usage.n_tokens_prompt > 5);
  CHECK(tr.usage.n_tokens_generated > 0);
  MESSAGE("turn: " << e->render(t.messages, {}) << "|" << tr.message.content);
  // second turn of the same job: the resident KV serves the rendered conversation
  t.messages.push_back({role::assistant, tr.message.content, {}, "", ""});
  t.messages.push_back({role::user, "And then?", {}, "", ""});
  std::promise<turn_result> tp2;
  e->submit(t, {nullptr, [&](turn_result r) { tp2.set_value(r); }});
  auto tr2 = tp2.get_future().get();
  MESSAGE("turn 2: prompt " << tr2.usage.n_tokens_prompt << ", cached " << tr2.usage.n_tokens_cached);
  CHECK(tr2.usage.n_tokens_cached > tr.usage.n_tokens_prompt / 2);
  e->stop();
}

TEST_CASE("engine: json_schema constrains the output (allowed-token mask before sampling)") {
  const auto g = load_golden();
  auto e = load(tiny_config());
  auto r = greedy(g[0].prompt_ids, 60);
  r.json_schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  auto res = run_one(*e, r);
  MESSAGE("constrained: " << res.text << " (" << std::string(to_string(res.finish)) << ")");
  CHECK(res.finish != finish_reason::error);
  const size_t first = res.text.find_first_not_of(" \t\r\n");
  REQUIRE(first != std::string::npos);
  CHECK(res.text[first] == '{');  // the tiny model would never write JSON unconstrained
  if (res.finish == finish_reason::stop) CHECK(grammar::validate_json(r.json_schema, res.text).empty());
  auto bad = greedy(g[0].prompt_ids, 4);
  bad.json_schema = R"({"type":"object","patternProperties":{}})";
  auto br = run_one(*e, bad);
  CHECK(br.finish == finish_reason::error);
  MESSAGE(br.error);
}

TEST_CASE("engine: a turn with tool_choice required ends in a parsed tool call") {
  auto e = load(tiny_config());
  turn_request t;
  t.job_key = 11;
  t.messages = {{role::user, "What is the weather in Paris?", {}, "", ""}};
  t.tools = {{"get_weather", "Current weather for a city",
              R"({"type":"object","properties":{"city":{"enum":["Paris","London"]}},"required":["city"]})"}};
  t.choice.mode = tool_choice_mode::required;
  t.parallel_tool_calls = false;
  t.max_tokens = 400;
  REQUIRE_FALSE(e->validate(t).has_value());
  bool done = false;
  turn_result res;
  e->submit(t, {nullptr, [&](turn_result r) { res = std::move(r); done = true; }});
  while (!done) e->step();
  MESSAGE("finish " << std::string(to_string(res.finish)) << ", error '" << res.error << "'");
  CHECK(res.finish == finish_reason::tool_calls);
  REQUIRE(res.message.tool_calls.size() == 1);
  CHECK(res.message.tool_calls[0].name == "get_weather");
  CHECK(res.message.tool_calls[0].arguments_json.find("city") != std::string::npos);
  // validate() names what is wrong
  auto bad = t;
  bad.choice = {tool_choice_mode::named, "nope"};
  CHECK(e->validate(bad).has_value());
  bad = t;
  bad.response_schema_json = R"({"type":"object","patternProperties":{}})";
  CHECK(e->validate(bad).has_value());
}
