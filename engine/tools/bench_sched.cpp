// agentq-bench_sched: scheduler / KV benchmarks through the public engine API, one JSON
// line per run.
//   agentq-bench_sched scaling --model F [--concurrency 1,4,16,64] [--gen N] [--prompt N] [--threads N]
//     decode scaling: aggregate generated tokens/s with N concurrent sequences ("scaling"), and the
//     same by CPU clock ("scaling_cpu_clock": tokens per CPU-second x threads)
//   every mode: [--device cpu|cuda|cuda:N] [--kv-mib M] [--kv-type f16|f32] [--block-size B]
//   agentq-bench_sched agent --model F [--jobs 16] [--turns 8] [--system 256] [--tool 64] [--gen 16]
//                          [--reuse 1|0] [--threads N] [--park-wait S] [--spill-dir DIR]
//     multi-turn agent workload: every job shares a long system prompt; each turn appends the
//     model's output and a tool result; residency on (reuse 1) vs re-prefill baseline (reuse 0);
//     also per turn index (first turn = 0): computed_tokens_by_turn, prompt_tokens_by_turn (mean over jobs);
//     --park-wait: the expected tool wait each park() announces (default 1 s: pinned in memory);
//     --spill-dir + a long --park-wait (e.g. 3600): every pause spills the job's KV to that disk
//     tier and the next turn restores it (n_spills / n_restores in the JSON line)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agentq/engine.h"

using namespace agentq;

namespace {

struct args {
  std::string mode, model, device = "cpu";
  std::vector<int> concurrency = {1, 4, 16, 64};
  int gen = 32, prompt = 16, threads = 0, jobs = 16, turns = 8, system = 256, tool = 64, reuse = 1;
  double kv_mib = 256;
  int32_t block_size = engine_config{}.block_size;
  double park_wait = 1.0;  // seconds announced to park(): 1 = a short tool call (pinned)
  std::string spill_dir;   // empty = no disk tier
  std::string kv_type;     // empty = the device's default
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: agentq-bench_sched {scaling|agent} --model F [options] (see the file header)\n");
  std::exit(2);
}

args parse(int argc, char** argv) {
  if (argc < 2) usage();
  args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) usage();
    std::string v = argv[++i];
    if (k == "--model") a.model = v;
    else if (k == "--concurrency") {
      a.concurrency.clear();
      std::stringstream ss(v);
      std::string x;
      while (std::getline(ss, x, ',')) a.concurrency.push_back(std::stoi(x));
    } else if (k == "--gen") a.gen = std::stoi(v);
    else if (k == "--prompt") a.prompt = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--jobs") a.jobs = std::stoi(v);
    else if (k == "--turns") a.turns = std::stoi(v);
    else if (k == "--system") a.system = std::stoi(v);
    else if (k == "--tool") a.tool = std::stoi(v);
    else if (k == "--reuse") a.reuse = std::stoi(v);
    else if (k == "--kv-mib") a.kv_mib = std::stod(v);
    else if (k == "--park-wait") a.park_wait = std::stod(v);
    else if (k == "--spill-dir") a.spill_dir = v;
    else if (k == "--device") a.device = v;
    else if (k == "--kv-type") a.kv_type = v;
    else if (k == "--block-size") a.block_size = std::stoi(v);
    else usage();
  }
  if (a.model.empty() || (a.mode != "scaling" && a.mode != "agent")) usage();
  return a;
}

std::unique_ptr<engine> open(const args& a, bool reuse, int32_t max_running, int32_t max_step_tokens = 512) {
  engine_config c;
  c.max_step_tokens = max_step_tokens;
  c.model_path = a.model;
  c.device = a.device;
  c.n_threads = a.threads;
  c.kv_budget_bytes = uint64_t(a.kv_mib * 1024 * 1024);
  c.max_running = max_running;
  c.prefix_reuse = reuse;
  c.spill_dir = a.spill_dir;
  c.kv_type = a.kv_type;
  c.block_size = a.block_size;
  std::string err;
  auto e = engine::load(c, &err);
  if (!e) {
    std::fprintf(stderr, "agentq-bench_sched: %s\n", err.c_str());
    std::exit(1);
  }
  return e;
}

// CPU seconds of the whole process (all pool threads).
double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Deterministic token ids away from the special ones.
token_id tok(const engine& e, uint64_t x) {
  x = (x + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  const int32_t lo = 3, span = e.model().n_vocab - lo;
  return token_id(lo + int32_t((x >> 33) % uint64_t(span)));
}

int run_scaling(const args& a) {
  std::string scaling, scaling_cpu;
  std::string detail;
  // NOTE: on a GPU one engine serves every concurrency (loading an 8B model's weights per run
  // would dominate); its limits are those of the largest run.
  int c_max = 1;
  for (int c : a.concurrency) c_max = std::max(c_max, c);
  std::unique_ptr<engine> shared;
  if (a.device != "cpu") shared = open(a, true, std::max(64, c_max), std::max(512, c_max * (a.prompt + 1)));
  for (int c : a.concurrency) {
    // NOTE: a step budget that fits every prompt, so one step prefills them all
    auto own = shared ? nullptr : open(a, true, std::max(64, c), std::max(512, c * (a.prompt + 1)));
    engine* e = shared ? shared.get() : own.get();
    // warm-up: one short request (thread pool, page faults)
    {
      token_request r;
      r.prompt = {e->model().bos >= 0 ? e->model().bos : 1, tok(*e, 1)};
      r.max_tokens = 2;
      e->submit(r, {});
      while (e->step()) {
      }
    }
    int n_done = 0;
    int64_t n_gen = 0;
    for (int i = 0; i < c; ++i) {
      token_request r;
      for (int k = 0; k < a.prompt; ++k) r.prompt.push_back(tok(*e, uint64_t(i) * 1000 + uint64_t(k)));
      r.max_tokens = a.gen;
      r.stop_tokens = {};
      e->submit(r, {nullptr, [&](token_result res) { ++n_done; n_gen += res.usage.n_tokens_generated; }});
    }
    // NOTE: timed from the first decode step, so the (short) prefill is excluded
    e->step();
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_s();
    int64_t gen_at_t0 = int64_t(c);  // every sequence sampled its first token in the prefill step
    while (n_done < c) e->step();
    const double wall = seconds_since(t0);
    const double tps = double(n_gen - gen_at_t0) / wall;
    // NOTE: tokens per CPU-second x threads: the rate had the pool's threads had their cores
    // to themselves (robust on a shared, oversubscribed host; the pool's spin-waits count).
    const int n_threads = a.threads > 0 ? a.threads : int(std::thread::hardware_concurrency());
    const double tps_cpu = double(n_gen - gen_at_t0) / std::max(1e-9, process_cpu_s() - cpu0) * n_threads;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s\"%d\":%.1f", scaling.empty() ? "" : ",", c, tps);
    scaling += buf;
    std::snprintf(buf, sizeof buf, "%s\"%d\":%.1f", scaling_cpu.empty() ? "" : ",", c, tps_cpu);
    scaling_cpu += buf;
    std::fprintf(stderr, "concurrency %3d: %6.1f tokens/s (%lld tokens, %.2f s); by CPU clock %6.1f tokens/s\n", c,
                 tps, static_cast<long long>(n_gen - gen_at_t0), wall, tps_cpu);
  }
  std::printf("{\"bench\":\"batching\",\"device\":\"%s\",\"model\":\"%s\",\"gen\":%d,\"prompt\":%d,\"scaling\":{%s},"
              "\"scaling_cpu_clock\":{%s}}\n",
              a.device.c_str(), a.model.c_str(), a.gen, a.prompt, scaling.c_str(), scaling_cpu.c_str());
  return 0;
}

int run_agent(const args& a) {
  auto e = open(a, a.reuse != 0, 64);
  const token_id bos = e->model().bos >= 0 ? e->model().bos : 1;
  std::vector<token_id> system = {bos};
  for (int k = 1; k < a.system; ++k) system.push_back(tok(*e, 777000 + uint64_t(k)));
  struct job {
    std::vector<token_id> convo;  // the whole conversation so far
    int turn = 0;
  };
  std::vector<job> jobs(size_t(a.jobs));
  // continuation turns (2nd and later) vs first turns
  int64_t n_new = 0, n_computed = 0, n_cached = 0, n_turns = 0;
  int64_t n_first_computed = 0, n_first_prompt = 0, n_first = 0;
  // per turn index (0 = first turn), summed over jobs: computed and prompt tokens
  std::vector<int64_t> n_computed_by_turn(size_t(a.turns), 0), n_prompt_by_turn(size_t(a.turns), 0);
  int n_active = 0;
  std::function<void(int)> submit_turn = [&](int j) {
    job& jb = jobs[size_t(j)];
    const size_t before = jb.convo.size();
    if (jb.turn == 0) {
      jb.convo = system;
      for (int k = 0; k < 16; ++k) jb.convo.push_back(tok(*e, uint64_t(j) * 100000 + uint64_t(k)));
    } else {
      for (int k = 0; k < a.tool; ++k) jb.convo.push_back(tok(*e, uint64_t(j) * 100000 + uint64_t(jb.turn) * 1000 + uint64_t(k)));
    }
    token_request r;
    r.job_key = uint64_t(j) + 1;
    r.arrival_seq = uint64_t(j) + 1;
    r.prompt = jb.convo;
    r.max_tokens = a.gen;
    r.stop_tokens = {};
    const int64_t new_tokens = int64_t(jb.convo.size() - (jb.turn == 0 ? 0 : before));
    ++n_active;
    e->submit(r, {nullptr, [&, j, new_tokens](token_result res) {
      --n_active;
      job& jb2 = jobs[size_t(j)];
      n_computed_by_turn[size_t(jb2.turn)] += res.usage.n_tokens_computed;
      n_prompt_by_turn[size_t(jb2.turn)] += res.usage.n_tokens_prompt;
      if (jb2.turn == 0) {
        ++n_first;
        n_first_prompt += res.usage.n_tokens_prompt;
        n_first_computed += res.usage.n_tokens_computed;
      } else {
        ++n_turns;
        n_new += new_tokens;
        n_computed += res.usage.n_tokens_computed;
        n_cached += res.usage.n_tokens_cached;
      }
      jb2.convo.insert(jb2.convo.end(), res.output_ids.begin(), res.output_ids.end());
      ++jb2.turn;
      if (jb2.turn < a.turns) {
        e->park(uint64_t(j) + 1, a.park_wait);
        submit_turn(j);
      } else {
        e->release(uint64_t(j) + 1);
      }
    }});
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < a.jobs; ++j) submit_turn(j);
  while (n_active > 0) e->step();
  const double wall = seconds_since(t0);
  const auto st = e->stats();
  // per-turn means over jobs, e.g. "computed_tokens_by_turn":[48.0,65.0,...]
  std::string by_turn_computed, by_turn_prompt;
  for (size_t t = 0; t < size_t(a.turns); ++t) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.1f", t ? "," : "", double(n_computed_by_turn[t]) / double(std::max(1, a.jobs)));
    by_turn_computed += buf;
    std::snprintf(buf, sizeof buf, "%s%.1f", t ? "," : "", double(n_prompt_by_turn[t]) / double(std::max(1, a.jobs)));
    by_turn_prompt += buf;
  }
  std::printf(
      "{\"bench\":\"agent\",\"reuse\":%d,\"jobs\":%d,\"turns\":%d,\"system_tokens\":%d,\"tool_tokens\":%d,\"gen\":%d,"
      "\"new_tokens_per_turn\":%.1f,\"computed_tokens_per_turn\":%.1f,\"cached_tokens_per_turn\":%.1f,\"wall_s\":%.3f,"
      "\"first_turn_prompt_tokens\":%.1f,\"first_turn_computed_tokens\":%.1f,\"n_evictions\":%lld,"
      "\"park_wait_s\":%g,\"spill\":%s,\"n_spills\":%lld,\"n_restores\":%lld,"
      "\"computed_tokens_by_turn\":[%s],\"prompt_tokens_by_turn\":[%s]}\n",
      a.reuse, a.jobs, a.turns, a.system, a.tool, a.gen, double(n_new) / double(std::max<int64_t>(1, n_turns)),
      double(n_computed) / double(std::max<int64_t>(1, n_turns)), double(n_cached) / double(std::max<int64_t>(1, n_turns)),
      wall, double(n_first_prompt) / double(std::max<int64_t>(1, n_first)),
      double(n_first_computed) / double(std::max<int64_t>(1, n_first)), static_cast<long long>(st.n_evictions),
      a.park_wait, a.spill_dir.empty() ? "false" : "true", static_cast<long long>(st.n_spills),
      static_cast<long long>(st.n_restores),
      by_turn_computed.c_str(), by_turn_prompt.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  return a.mode == "scaling" ? run_scaling(a) : run_agent(a);
}
