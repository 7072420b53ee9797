// llamacpp_ref: llama.cpp's CPU backend as the engine's correctness reference. Loads a GGUF, runs
// greedy decoding and prints one JSON line per prompt in the shape of ../shared/golden/*.jsonl
// (prompt_ids, output_ids, top5_per_step [[id, logit], ...], output_text). Built outside the
// repository against a llama.cpp build by scripts/dev/llamacpp_ref.sh; never linked into agentq.
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
  std::string model;
  std::vector<std::string> prompts;  // --prompt, repeatable
  std::vector<std::string> id_lists; // --ids "1,2,3", repeatable (bypasses the tokenizer)
  int n_predict = 32;
  int n_top = 5;
  int n_threads = 1;
  int n_ctx = 512;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "llamacpp_ref: %s\nusage: llamacpp_ref --model F.gguf (--prompt TEXT | --ids 1,2,3)... [-n N] "
               "[--top K] [--threads T] [--ctx C]\n",
               msg);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--prompt") o.prompts.push_back(next());
    else if (a == "--ids") o.id_lists.push_back(next());
    else if (a == "-n") o.n_predict = std::atoi(next().c_str());
    else if (a == "--top") o.n_top = std::atoi(next().c_str());
    else if (a == "--threads") o.n_threads = std::atoi(next().c_str());
    else if (a == "--ctx") o.n_ctx = std::atoi(next().c_str());
    else usage(("unknown argument " + a).c_str());
  }
  if (o.model.empty()) usage("--model is required");
  if (o.prompts.empty() && o.id_lists.empty()) usage("give at least one --prompt or --ids");
  return o;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += char(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); out += b; }
    else out += char(c);
  }
  return out;
}

std::string piece(const llama_vocab* vocab, llama_token t) {
  char buf[256];
  const int n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, false);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

void run_one(llama_model* model, const options& o, const std::string& prompt, std::vector<llama_token> ids) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  if (ids.empty()) {
    const int n = -llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), nullptr, 0, true, true);
    ids.resize(size_t(n));
    llama_tokenize(vocab, prompt.c_str(), int(prompt.size()), ids.data(), n, true, true);
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(o.n_ctx);
  cp.n_batch = uint32_t(o.n_ctx);
  cp.n_threads = o.n_threads;
  cp.n_threads_batch = o.n_threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) { std::fprintf(stderr, "llamacpp_ref: cannot create a context\n"); std::exit(1); }
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<llama_token> out;
  std::string tops = "[", text;
  std::vector<llama_token> batch_ids = ids;
  for (int step = 0; step < o.n_predict; ++step) {
    llama_batch b = llama_batch_get_one(batch_ids.data(), int32_t(batch_ids.size()));
    if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "llamacpp_ref: llama_decode failed\n"); std::exit(1); }
    const float* logits = llama_get_logits_ith(ctx, -1);
    std::vector<int> order(static_cast<size_t>(n_vocab));
    for (int i = 0; i < n_vocab; ++i) order[size_t(i)] = i;
    const int k = std::min(o.n_top, n_vocab);
    // ties break to the lower id, as a greedy argmax scanning upwards does
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int c) {
      return logits[a] != logits[c] ? logits[a] > logits[c] : a < c;
    });
    tops += step ? ",[" : "[";
    for (int j = 0; j < k; ++j) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s[%d, %.5f]", j ? ", " : "", order[size_t(j)], double(logits[order[size_t(j)]]));
      tops += buf;
    }
    tops += "]";
    const llama_token next = order[0];
    out.push_back(next);
    text += piece(vocab, next);
    batch_ids.assign(1, next);
  }
  tops += "]";
  std::string line = "{\"prompt\": \"" + json_escape(prompt) + "\", \"prompt_ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
  line += "], \"output_ids\": [";
  for (size_t i = 0; i < out.size(); ++i) line += (i ? ", " : "") + std::to_string(out[i]);
  line += "], \"top5_per_step\": " + tops + ", \"output_text\": \"" + json_escape(text) + "\"}";
  std::printf("%s\n", line.c_str());
  llama_free(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  llama_backend_init();
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
  if (!model) { std::fprintf(stderr, "llamacpp_ref: cannot load %s\n", o.model.c_str()); return 1; }
  for (const auto& p : o.prompts) run_one(model, o, p, {});
  for (const auto& l : o.id_lists) {
    std::vector<llama_token> ids;
    for (const char* s = l.c_str(); *s;) {
      char* end = nullptr;
      ids.push_back(llama_token(std::strtol(s, &end, 10)));
      if (end == s) usage("--ids takes comma-separated integers");
      s = *end == ',' ? end + 1 : end;
    }
    run_one(model, o, "", ids);
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
