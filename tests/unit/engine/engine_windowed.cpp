// The engine with windowed KV on the sliding-window families (synthetic gemma3 and gpt-oss
// parity models, window 8, 16-token blocks): greedy outputs equal to the full-KV engine's,
// alone and batched; a second turn resumes from resident KV; spill -> restore resumes from the
// short file (the windowed layers' old blocks are not in it); a shared prefix is reused while
// the cache keeps its windowed pages; parked KV counts what it holds. And (#28) a model header
// given the pool a worker advertises (model_desc::kv) answers the KV-room check as the engine does.
#include <doctest/doctest.h>

#include <filesystem>

#include <unistd.h>

#include "engine_impl.h"
#include "gguf/synthetic.h"
#include "agentq/model_header.h"
#include "golden.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

using test::greedy;
using test::run_all;
using test::run_one;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("agentq-windowed-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The family's parity model as a file (the engine loads from a path).
std::string write_model(const std::string& arch, const fs::path& dir) {
  const fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing (the shared data beside the checkout)");
  const fs::path path = dir / (arch + ".gguf");
  std::string err;
  REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(arch, 25, vocab.string()), path.string(), nullptr, &err), err);
  return path.string();
}

engine_config config(const std::string& model, bool windowed) {
  engine_config c;
  c.model_path = model;
  c.n_threads = 2;
  c.block_size = 16;
  c.kv_budget_bytes = 8ull << 20;
  c.windowed_kv = windowed;
  return c;
}

std::unique_ptr<engine_impl> load(const engine_config& c) { return test::load_as<engine_impl>(c); }

std::vector<token_id> prompt(int32_t n, int32_t salt) {
  std::vector<token_id> p = {1};
  for (int32_t i = 1; i < n; ++i) p.push_back(token_id(300 + (i * 37 + salt * 101) % 20000));
  return p;
}

}  // namespace

TEST_CASE("engine windowed KV: outputs equal full KV; resume, spill and restore, shared prefixes") {
  for (const char* arch : {"gemma3", "gpt-oss"}) {
    CAPTURE(std::string(arch));
    const fs::path dir = temp_dir(arch);
    const std::string model = write_model(arch, dir);
    auto full = load(config(model, false));
    auto cfg = config(model, true);
    cfg.spill_dir = (dir / "kv").string();
    auto e = load(cfg);
    const kv_layout& wl = e->pool().layout();
    REQUIRE(e->pool().windowed());
    REQUIRE(wl.window == 8);
    CHECK_FALSE(full->pool().windowed());

    // Batched: four prompts far longer than the window, together vs the full-KV engine alone.
    std::vector<token_request> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(greedy(prompt(90 + 13 * i, i), 24));  // no job: not kept resident
    const auto res = run_all(*e, reqs);
    for (int i = 0; i < 4; ++i) {
      const auto want = run_one(*full, greedy(reqs[size_t(i)].prompt, 24));
      CHECK_MESSAGE(res[size_t(i)].output_ids == want.output_ids, "request ", i);
    }
    e->sanity();

    // Two turns of job 7 through the disk tier: the spill file holds the short blocks, the
    // restore resumes from it and computes only the appended tokens.
    std::vector<kv_move_event> moves;
    e->on_kv_move([&](const kv_move_event& m) { moves.push_back(m); });
    const auto p1 = prompt(120, 9);
    const auto t1 = run_one(*e, greedy(p1, 20, 7));
    e->park(7, 3600.0);
    e->step();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].what == kv_move_event::kind::spill);
    CHECK(moves[0].n_bytes == wl.seq_bytes(moves[0].n_tokens));
    CHECK(moves[0].n_bytes < int64_t(e->pool().blocks_for_tokens(moves[0].n_tokens)) * wl.block_bytes());
    auto p2 = p1;
    p2.insert(p2.end(), t1.output_ids.begin(), t1.output_ids.end());
    p2.insert(p2.end(), {13, 350, 351, 352});
    const auto t2 = run_one(*e, greedy(p2, 20, 7));
    CHECK(e->stats().n_restores == 1);
    CHECK(t2.usage.n_tokens_computed <= 5);
    CHECK(t2.output_ids == run_one(*full, greedy(p2, 20)).output_ids);
    e->sanity();

    // A resident second turn (no spill) resumes too.
    auto p3 = p2;
    p3.insert(p3.end(), t2.output_ids.begin(), t2.output_ids.end());
    p3.insert(p3.end(), {13, 360});
    const auto t3 = run_one(*e, greedy(p3, 16, 7));
    CHECK(t3.usage.n_tokens_computed <= 3);
    CHECK(t3.output_ids == run_one(*full, greedy(p3, 16)).output_ids);
    // The parked job counts what it holds: full layers whole, windowed layers the window.
    e->park(7, 1.0);
    e->step();
    const int64_t n_held = int64_t(p3.size()) + 15;
    CHECK(e->stats().n_blocks_parked == (wl.seq_bytes(int32_t(n_held)) + wl.block_bytes() - 1) / wl.block_bytes());
    CHECK(e->stats().n_blocks_parked < e->pool().blocks_for_tokens(int32_t(n_held)));
    e->release(7);
    e->step();

    // A second job sharing a long prefix with a finished one: with memory to spare the cache kept
    // the shared blocks' windowed pages (lingering), so it reuses the prefix.
    auto a = prompt(100, 3), b = a;
    a.insert(a.end(), {400, 401, 402});
    b.insert(b.end(), {410, 411});
    run_one(*e, greedy(a, 8, 31));
    const auto rb = run_one(*e, greedy(b, 8, 32));
    CHECK(rb.usage.n_tokens_cached >= 80);
    CHECK(rb.output_ids == run_one(*full, greedy(b, 8)).output_ids);
    e->sanity();
    fs::remove_all(dir);
  }
}

// #28: a control plane without the pool checks the KV room with what a worker advertises
// (model_desc::kv) and the model header's layer count; on windowed pools (the window's blocks
// only in the windowed layers) its answers must be the engine's own.
TEST_CASE("windowed KV: the advertised kv_room gives a header the engine's KV-room answers") {
  const fs::path dir = temp_dir("room");
  for (const char* arch : {"gemma3", "gpt-oss"}) {
    const std::string path = write_model(arch, dir);
    for (bool windowed : {true, false}) {
      int n_kv_refused = 0, n_accepted = 0;  // over pools of 64 KiB to 1 MiB
      for (uint64_t budget : {1ull << 16, 1ull << 18, 1ull << 20}) {
        engine_config c = config(path, windowed);
        c.kv_budget_bytes = budget;
        c.chat_family = "chatml";
        auto e = load(c);
        std::string err;
        auto h = model_header::open(path, "chatml", &err);
        REQUIRE_MESSAGE(h, err);
        CHECK(h->model().n_layer == e->model().n_layer);
        CHECK((e->model().kv.n_layer_windowed > 0) == windowed);
        const kv_room room = e->model().kv;
        for (int n = 1; n <= 120; n += 7) {
          turn_request r;
          r.messages.push_back({role::user, std::string(size_t(n) * 3, 'a'), {}, {}, {}});
          const auto want = e->validate(r);
          CHECK(h->validate(r, std::span<const kv_room>(&room, 1)) == want);
          n_accepted += !want;
          n_kv_refused += want && want->find("KV memory") != std::string::npos;
        }
      }
      CHECK(n_kv_refused > 0);
      CHECK(n_accepted > 0);
    }
  }
  fs::remove_all(dir);
}
