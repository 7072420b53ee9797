// agentq-bench_grammar: time of the constrained-decoding token mask per decode
// step (thread CPU time) on a real vocabulary (default: the 32k llama-spm vocab), for a few
// schemas, along random walks. Prints a table and one JSON line.
#include <algorithm>
#include <ctime>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/vocab_pieces.h"

using namespace agentq;
using clock_type = std::chrono::steady_clock;

static const char* schemas[][2] = {
    {"tool_args", R"({"type":"object","properties":{"location":{"type":"string","maxLength":40},
        "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},
        "required":["location"],"additionalProperties":false})"},
    {"nested", R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{
        "id":{"type":"integer"},"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":4}},
        "required":["id","name"]},"maxItems":4},"ok":{"type":"boolean"}},"required":["items","ok"]})"},
    {"any_json", R"({})"},
};

int main(int argc, char** argv) {
  std::string vocab_path = "../shared/models/vocab/ggml-vocab-llama-spm.gguf";
  int n_walks = 6, max_steps = 300;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--vocab") && i + 1 < argc) vocab_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) { n_walks = 2; max_steps = 150; }
    else if (!std::strcmp(argv[i], "--walks") && i + 1 < argc) n_walks = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: agentq-bench_grammar [--vocab GGUF] [--quick] [--walks N]\n");
      return 2;
    }
  }
  grammar::gguf_vocab v;
  std::string err;
  if (!grammar::load_gguf_vocab(vocab_path, &v, &err)) {
    std::fprintf(stderr, "bench_grammar: %s\n", err.c_str());
    return 1;
  }
  auto t0 = clock_type::now();
  auto vocab = grammar::make_vocab_index(v.pieces, v.eos_ids);
  double index_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  std::printf("vocab %s: %zu tokens, index built in %.1f ms\n", vocab_path.c_str(), v.pieces.size(), index_ms);
  std::printf("%-10s %8s %10s %10s %10s %10s\n", "schema", "steps", "mean_us", "p50_us", "p99_us", "max_us");
  std::string json = "{\"bench\":\"grammar\",\"n_vocab\":" + std::to_string(v.pieces.size()) +
                     ",\"index_ms\":" + std::to_string(index_ms) + ",\"schemas\":{";
  std::vector<double> all;
  bool first = true;
  for (auto& s : schemas) {
    std::vector<double> us;
    for (int w = 0; w < n_walks; w++) {
      auto c = grammar::make_json_constraint(s[1], vocab, &err);
      if (!c) {
        std::fprintf(stderr, "bench_grammar: %s\n", err.c_str());
        return 1;
      }
      std::mt19937_64 rng(w + 1);
      std::vector<uint32_t> mask;
      std::vector<token_id> allowed;
      for (int step = 0; step < max_steps; step++) {
        // NOTE: thread CPU time, so a busy shared host's preemptions don't count as mask time.
        timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        c->fill_mask(mask);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        us.push_back((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
        allowed.clear();
        bool eos = false;
        for (size_t t = 0; t < v.pieces.size(); t++) {
          if (!(mask[t / 32] >> (t % 32) & 1)) continue;
          if (std::find(v.eos_ids.begin(), v.eos_ids.end(), token_id(t)) != v.eos_ids.end()) eos = true;
          else allowed.push_back(token_id(t));
        }
        if (allowed.empty() || (eos && rng() % 3 == 0)) break;
        c->accept(allowed[rng() % allowed.size()]);
      }
    }
    std::sort(us.begin(), us.end());
    double mean = 0;
    for (double x : us) mean += x;
    mean /= std::max<size_t>(1, us.size());
    auto pct = [&](double p) { return us.empty() ? 0.0 : us[std::min(us.size() - 1, size_t(p * us.size()))]; };
    std::printf("%-10s %8zu %10.1f %10.1f %10.1f %10.1f\n", s[0], us.size(), mean, pct(0.5), pct(0.99), us.back());
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s\"%s\":{\"steps\":%zu,\"mean_us\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f}",
                  first ? "" : ",", s[0], us.size(), mean, pct(0.5), pct(0.99), us.back());
    json += buf;
    first = false;
    all.insert(all.end(), us.begin(), us.end());
  }
  double mean = 0;
  for (double x : all) mean += x;
  mean /= std::max<size_t>(1, all.size());
  char buf[64];
  std::snprintf(buf, sizeof buf, "},\"mean_us\":%.1f}", mean);
  json += buf;
  std::printf("%s\n", json.c_str());
  return 0;
}
