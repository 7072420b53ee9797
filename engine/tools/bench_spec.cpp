// agentq-bench_spec: speculative decoding (prompt lookup) on vs off in the same run, one
// JSON line per (workload, batch): generated tokens/s both ways, their ratio, acceptance.
//   agentq-bench_spec --model F [--batch 1,8] [--threads N] [--gen N] [--reps R] [--tool N] [--draft-model D] [--text FILE]
//                     [--workloads repetitive,predicted,plain] [--aa 1] [--only on|off]
//                     [--max-draft K] [--step-tokens N] [--dump-prompt FILE]
// --draft-model: the "on" engine also has a draft model (same vocabulary) proposing where
// lookup finds nothing.
// Workloads: "repetitive": the prompt holds a ~--tool-token text the model wrote (its greedy
// continuation of a seed, a tool result) with a token edited every 25, then the seed again:
// the turn rewrites it (greedy). "plain": the seed only, sampled at temperature 1 (seeded: no
// repetition to look up, even where a greedy model would loop). "predicted": the repetitive
// prompt with a Predicted Output: the model's own greedy answer to it (measured first, without
// speculation) with a token edited every 25, as an agent passing the file it is editing; on
// synthetic random-weight models this is how a rewrite is forced (they do not copy by
// themselves), so it measures the mechanism at ~96% agreement. Each batch runs
// --batch copies (seeds offset per sequence). Median of --reps runs, on and off alternating.
// --text FILE: the tool results are --tool-token passages of FILE (sequence b starts 40 b tokens
// in) instead of the model's own continuation: for copy models (agentq-mkgguf --shape X-copy),
// which rewrite what they read, so "repetitive" is a real rewrite with no Predicted Output.
// decode_tok_per_s_*: the same tokens over the time from the first text out (the prefill left
// out; each sequence's first token is not counted); decode_tok_per_cpu_s_*: the same over the
// process's CPU time (what a decode costs, whoever else shares the host); tok_per_cpu_s_* and
// ratio_cpu_all: all generated tokens over the CPU time from submit, the prefill included (the
// wall ratio's counterpart on a loaded host; the pool's spin-waits count too). Every line also reports copied: the fraction of "on" output tokens that continue an earlier
// occurrence of the 3 tokens before them (what a rewriting model does), so the premise is visible.
// --only on|off: time one engine only (for perf record; the ratios then read 0 or inf).
// --max-draft K, --step-tokens N: the "on" engine's spec_max_draft and spec_step_tokens (0:
// the engine's defaults).
// --dump-prompt FILE: also write the first sequence's "repetitive" prompt as text (no BOS), the
// prompt scripts/bench/spec.sh gives llama.cpp's llama-lookup (which tokenizes it again).
#include <fstream>
#include <sstream>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "agentq/engine.h"

using namespace agentq;

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::atoi(s.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return v;
}

// CPU time of this process (all threads). NOTE: on a shared, oversubscribed host the wall
// clock measures the other tenants as much as the engine; the CPU time a decode costs does not
// (the idle engine's pool sleeps after ~100 us of spinning).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct run_result {
  double tok_per_s = 0;         // generated tokens over the wall time from submit (with the prefill)
  double decode_tok_per_s = 0;  // generated tokens after each one's first, from the first text out
  double decode_tok_per_cpu_s = 0;  // the same over the process's CPU time (both threads) then
  double tok_per_cpu_s = 0;  // generated tokens over the process's CPU time from submit (with the prefill)
  int64_t generated = 0, accepted = 0, rejected = 0;
};

run_result run(engine& e, const std::vector<std::vector<token_id>>& prompts, int gen, float temperature,
               const std::vector<std::vector<token_id>>* predictions = nullptr,
               std::vector<std::vector<token_id>>* outputs = nullptr) {
  std::vector<bool> done(prompts.size(), false);
  run_result r;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  auto t_first = t0;
  double cpu_first = 0;
  bool any_text = false;
  for (size_t i = 0; i < prompts.size(); ++i) {
    token_request q;
    q.prompt = prompts[i];
    q.max_tokens = gen;
    q.sampling.temperature = temperature;
    q.sampling.seed = 1234 + i;
    if (predictions) q.prediction = (*predictions)[i];
    e.submit(q, {[&](std::string_view) {
                   if (!any_text) {
                     t_first = std::chrono::steady_clock::now();
                     cpu_first = cpu_seconds();
                   }
                   any_text = true;
                 },
                 [&, i](token_result res) {
                   done[i] = true;
                   if (outputs) (*outputs)[i] = res.output_ids;
                   r.generated += res.usage.n_tokens_generated;
                   r.accepted += res.usage.n_tokens_draft_accepted;
                   r.rejected += res.usage.n_tokens_draft_rejected;
                 }});
  }
  while (!std::all_of(done.begin(), done.end(), [](bool b) { return b; })) e.step();
  const auto t1 = std::chrono::steady_clock::now();
  r.tok_per_s = double(r.generated) / std::chrono::duration<double>(t1 - t0).count();
  r.decode_tok_per_s = double(r.generated - int64_t(prompts.size())) / std::chrono::duration<double>(t1 - t_first).count();
  const double cpu1 = cpu_seconds();
  r.decode_tok_per_cpu_s = double(r.generated - int64_t(prompts.size())) / (cpu1 - cpu_first);
  r.tok_per_cpu_s = double(r.generated) / (cpu1 - cpu0);
  return r;
}

// Of the outputs' tokens, the fraction that continue an earlier occurrence of the three tokens
// before them (prompt and output so far): how much of the output is a copy.
double copied_fraction(const std::vector<std::vector<token_id>>& prompts, const std::vector<std::vector<token_id>>& outs) {
  int64_t n = 0, hit = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    std::vector<token_id> ctx = prompts[s];
    for (token_id t : outs[s]) {
      const size_t L = ctx.size();
      for (size_t j = 3; j < L; ++j)
        if (ctx[j] == t && std::equal(ctx.begin() + long(j) - 3, ctx.begin() + long(j), ctx.end() - 3)) {
          ++hit;
          break;
        }
      ++n;
      ctx.push_back(t);
    }
  }
  return n ? double(hit) / double(n) : 0.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, draft, text, workloads = "repetitive,predicted,plain";
  std::vector<int> batches = {1, 8};
  int threads = 2, gen = 128, reps = 3, tool = 300;
  bool aa = false;  // --aa 1: the "on" engine has speculation off too (an A/A run: the noise)
  std::string only;  // --only on|off: run one engine's reps only (profiling)
  int max_draft = 0, step_tokens = 0;
  std::string dump_prompt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--batch") batches = parse_list(v);
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--gen") gen = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--tool") tool = std::atoi(v.c_str());
    else if (k == "--draft-model") draft = v;
    else if (k == "--text") text = v;
    else if (k == "--workloads") workloads = v;
    else if (k == "--aa") aa = v == "1";
    else if (k == "--only" && (v == "on" || v == "off")) only = v;
    else if (k == "--max-draft") max_draft = std::atoi(v.c_str());
    else if (k == "--step-tokens") step_tokens = std::atoi(v.c_str());
    else if (k == "--dump-prompt") dump_prompt = v;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  if (model.empty()) {
    std::fprintf(stderr, "usage: agentq-bench_spec --model F [--batch 1,8] [--threads N] [--gen N] [--reps R] [--tool N]\n");
    return 2;
  }
  std::unique_ptr<engine> on, off;
  for (bool spec : {true, false}) {
    engine_config c;
    c.model_path = model;
    c.n_threads = threads;
    c.kv_budget_bytes = 512ull << 20;
    c.spec = spec && !aa;
    if (spec) c.draft_model_path = draft;
    if (spec && max_draft > 0) c.spec_max_draft = max_draft;
    if (spec && step_tokens > 0) c.spec_step_tokens = step_tokens;
    c.prefix_reuse = false;  // NOTE: every run prefills alike; only decoding differs
    std::string err;
    auto e = engine::load(c, &err);
    if (!e) { std::fprintf(stderr, "%s\n", err.c_str()); return 1; }
    (spec ? on : off) = std::move(e);
  }
  const int n_vocab = on->model().n_vocab;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  // seeds: "Once upon a time" plus a few varied tokens per sequence
  std::vector<std::vector<token_id>> seeds, tools;
  for (int b = 0; b < max_batch; ++b) {
    auto s = on->tokenize("Once upon a time, there was a little", true, false);
    s.push_back(token_id((1000 + 37 * b) % n_vocab));
    seeds.push_back(s);
  }
  if (!text.empty()) {
    std::ifstream f(text);
    if (!f) { std::fprintf(stderr, "cannot read %s\n", text.c_str()); return 1; }
    std::stringstream ss;
    ss << f.rdbuf();
    const auto all = on->tokenize(ss.str(), false, false);
    if (all.size() < size_t(tool + 40 * max_batch)) { std::fprintf(stderr, "%s: too short\n", text.c_str()); return 1; }
    for (int b = 0; b < max_batch; ++b) tools.emplace_back(all.begin() + 40 * b, all.begin() + 40 * b + tool);
    for (auto& t : tools)
      for (size_t j = 12; j < t.size(); j += 25) t[j] = token_id((t[j] + 7) % n_vocab);
  } else if (workloads != "plain") {
    // the tool results: each seed's greedy continuation (without speculation), edited
    std::vector<bool> done(seeds.size(), false);
    tools.resize(seeds.size());
    for (size_t i = 0; i < seeds.size(); ++i) {
      token_request q;
      q.prompt = seeds[i];
      q.max_tokens = tool;
      off->submit(q, {nullptr, [&, i](token_result r) { tools[i] = r.output_ids; done[i] = true; }});
    }
    while (!std::all_of(done.begin(), done.end(), [](bool b) { return b; })) off->step();
    for (auto& t : tools)
      for (size_t j = 12; j < t.size(); j += 25) t[j] = token_id((t[j] + 7) % n_vocab);
  }
  if (!dump_prompt.empty() && !tools.empty()) {
    // seed (its BOS left out: llama-lookup adds its own) + tool result + seed, as "repetitive"
    std::vector<token_id> p(seeds[0].begin() + (seeds[0].empty() ? 0 : 1), seeds[0].end());
    p.insert(p.end(), tools[0].begin(), tools[0].end());
    p.insert(p.end(), seeds[0].begin() + (seeds[0].empty() ? 0 : 1), seeds[0].end());
    std::ofstream f(dump_prompt, std::ios::binary);
    f << on->detokenize(p);
    if (!f) { std::fprintf(stderr, "cannot write %s\n", dump_prompt.c_str()); return 1; }
  }
  std::printf("# model %s, draft %s, threads %d, gen %d, reps %d\n", model.c_str(), draft.empty() ? "none" : draft.c_str(),
              threads, gen, reps);
  for (const char* workload : {"repetitive", "predicted", "plain"}) {
    if (("," + workloads + ",").find("," + std::string(workload) + ",") == std::string::npos) continue;
    const bool predicted = std::string(workload) == "predicted";
    for (int batch : batches) {
      std::vector<std::vector<token_id>> prompts;
      for (int b = 0; b < batch; ++b) {
        std::vector<token_id> p = seeds[size_t(b)];
        if (std::string(workload) != "plain") {
          p.insert(p.end(), tools[size_t(b)].begin(), tools[size_t(b)].end());
          p.insert(p.end(), seeds[size_t(b)].begin(), seeds[size_t(b)].end());
        }
        prompts.push_back(p);
      }
      const float temp = std::string(workload) == "plain" ? 1.0f : 0.0f;
      std::vector<std::vector<token_id>> preds;
      if (predicted) {
        // the answer itself, edited: what an agent passes when it rewrites a file
        preds.resize(prompts.size());
        run(*off, prompts, gen, temp, nullptr, &preds);
        for (auto& p : preds)
          for (size_t j = 12; j < p.size(); j += 25) p[j] = token_id((p[j] + 7) % n_vocab);
      }
      const auto* pp = predicted ? &preds : nullptr;
      run(*on, prompts, 4, temp, pp);  // warm-up
      run(*off, prompts, 4, temp, pp);
      std::vector<double> t_on, t_off, paired, d_on, d_off, c_on, c_off, w_on, w_off;
      std::vector<std::vector<token_id>> outs(prompts.size());
      run_result last_on;
      for (int r = 0; r < reps; ++r) {
        // NOTE: the order alternates: whichever runs second inherits a warmer machine
        auto run_off = [&] {
          const run_result o = only == "on" ? run_result{} : run(*off, prompts, gen, temp, pp);
          t_off.push_back(o.tok_per_s);
          d_off.push_back(o.decode_tok_per_s);
          c_off.push_back(o.decode_tok_per_cpu_s);
          w_off.push_back(o.tok_per_cpu_s);
        };
        if (r % 2) run_off();
        last_on = only == "off" ? run_result{} : run(*on, prompts, gen, temp, pp, &outs);
        t_on.push_back(last_on.tok_per_s);
        d_on.push_back(last_on.decode_tok_per_s);
        c_on.push_back(last_on.decode_tok_per_cpu_s);
        w_on.push_back(last_on.tok_per_cpu_s);
        if (r % 2 == 0) run_off();
        paired.push_back(t_on.back() / t_off.back());  // the two runs next to each other
      }
      const double a = median(t_on), b = median(t_off);
      const int64_t proposed = last_on.accepted + last_on.rejected;
      std::printf(
          "{\"bench\":\"spec\",\"draft\":%s,\"workload\":\"%s\",\"batch\":%d,\"tok_per_s_spec\":%.2f,\"tok_per_s_base\":%.2f,"
          "\"ratio\":%.3f,\"ratio_paired\":%.3f,\"decode_tok_per_s_spec\":%.2f,\"decode_tok_per_s_base\":%.2f,\"ratio_decode\":%.3f,\"decode_tok_per_cpu_s_spec\":%.2f,\"decode_tok_per_cpu_s_base\":%.2f,\"ratio_cpu\":%.3f,\"tok_per_cpu_s_spec\":%.2f,\"tok_per_cpu_s_base\":%.2f,\"ratio_cpu_all\":%.3f,\"copied\":%.3f,\"accepted\":%lld,\"rejected\":%lld,\"acceptance\":%.3f,\"accepted_per_generated\":%.3f}\n",
          draft.empty() ? "false" : "true", workload, batch, a, b, a / b, median(paired), median(d_on),
          median(d_off), median(d_on) / median(d_off), median(c_on), median(c_off), median(c_on) / median(c_off),
          median(w_on), median(w_off), median(w_on) / median(w_off),
          copied_fraction(prompts, outs), (long long)last_on.accepted, (long long)last_on.rejected,
          proposed ? double(last_on.accepted) / double(proposed) : 0.0,
          last_on.generated ? double(last_on.accepted) / double(last_on.generated) : 0.0);
      std::fflush(stdout);
    }
  }
  return 0;
}
