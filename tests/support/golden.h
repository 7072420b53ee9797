// The shared golden greedy outputs of the tiny model (../shared/golden/stories260K.greedy.jsonl):
// per line the prompt's token ids and llama.cpp's 128 greedy output ids; and the loop the engine
// tests drive it with (tiny_config, greedy requests, run_all stepping the engine to the end).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "test_env.h"

namespace agentq::test {

struct golden {
  std::vector<token_id> prompt_ids, output_ids;
};

// The integer array after "key": in one JSON line (enough for the golden file; no JSON library).
inline std::vector<token_id> int_array_after(const std::string& line, const std::string& key) {
  std::vector<token_id> v;
  size_t p = line.find("\"" + key + "\"");
  p = line.find('[', p);
  const size_t e = line.find(']', p);
  std::stringstream ss(line.substr(p + 1, e - p - 1));
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(token_id(std::stoi(item)));
  return v;
}

inline std::vector<golden> load_golden() {
  std::vector<golden> g;
  std::ifstream f(shared_dir() / "golden" / "stories260K.greedy.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) g.push_back({int_array_after(line, "prompt_ids"), int_array_after(line, "output_ids")});
  return g;
}

// The tiny model on `device` (the engine tests' usual config).
inline engine_config tiny_config(const std::string& device = "cpu", uint64_t kv_budget_bytes = 32ull << 20) {
  engine_config c;
  c.model_path = tiny_model().string();
  c.device = device;
  c.n_threads = 2;
  c.kv_budget_bytes = kv_budget_bytes;
  return c;
}

// engine::load as its implementation type (engine_impl: the internals tests look at); fails the test if it cannot.
template <class Impl>
std::unique_ptr<Impl> load_as(const engine_config& c) {
  std::string err;
  auto e = engine::load(c, &err);
  REQUIRE_MESSAGE(e, "load on ", c.device, ": ", err);
  return std::unique_ptr<Impl>(static_cast<Impl*>(e.release()));
}

// A greedy token request (job 0 = no residency; arrival order = the job key).
inline token_request greedy(std::vector<token_id> prompt, int32_t max_tokens, uint64_t job = 0) {
  token_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.job_key = job;
  r.arrival_seq = job;
  return r;
}

// Submit all, step until every one is done (Engine::sanity() between steps when it has one,
// as engine_impl does); the results in request order.
template <class Engine>
std::vector<token_result> run_all(Engine& e, std::vector<token_request> reqs) {
  std::vector<token_result> out(reqs.size());
  std::vector<bool> done(reqs.size(), false);
  for (size_t i = 0; i < reqs.size(); ++i)
    e.submit(std::move(reqs[i]), {nullptr, [&out, &done, i](token_result r) {
                                    out[i] = std::move(r);
                                    done[i] = true;
                                  }});
  for (int guard = 0; guard < 100000; ++guard) {
    e.step();
    if constexpr (requires { e.sanity(); }) e.sanity();
    if (std::all_of(done.begin(), done.end(), [](bool b) { return b; })) break;
  }
  for (size_t i = 0; i < done.size(); ++i) REQUIRE(done[i]);
  return out;
}

template <class Engine>
token_result run_one(Engine& e, token_request r) {
  return run_all(e, {std::move(r)})[0];
}

// Two turns of job 42: `prompt` (50 tokens out), then prompt + turn 1's output + a 10-token tool
// result (40 out). With resident KV, turn 2 computes only n_appended (+ turn 1's last sampled token).
struct two_turns {
  token_result t1, t2;
  std::vector<token_id> prompt2;  // turn 2's prompt
  int32_t n_appended = 0;         // tool-result tokens appended after turn 1's output
};
template <class Engine>
two_turns run_two_turns(Engine& e, const std::vector<token_id>& prompt) {
  two_turns r;
  r.t1 = run_one(e, greedy(prompt, 50, 42));
  r.prompt2 = prompt;
  r.prompt2.insert(r.prompt2.end(), r.t1.output_ids.begin(), r.t1.output_ids.end());
  const std::vector<token_id> tool_result = {13, 400, 401, 402, 403, 404, 405, 406, 407, 13};
  r.prompt2.insert(r.prompt2.end(), tool_result.begin(), tool_result.end());
  r.n_appended = int32_t(tool_result.size());
  r.t2 = run_one(e, greedy(r.prompt2, 40, 42));
  MESSAGE("turn 2: prompt " << r.t2.usage.n_tokens_prompt << ", cached " << r.t2.usage.n_tokens_cached << ", computed "
                            << r.t2.usage.n_tokens_computed);
  return r;
}

}  // namespace agentq::test
