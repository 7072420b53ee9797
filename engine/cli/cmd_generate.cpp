// `agentq-engine generate`: run one prompt through the engine (CPU, or --device cuda), with
// speculation (--spec / --no-spec, --draft-model), streaming text to stdout and reporting prompt
// and decode throughput on stderr (or one JSON object with --json).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "cli/commands.h"
#include "gguf/reader.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using namespace agentq;

int usage(FILE* f) {
  std::fprintf(f,
               "usage: agentq-engine generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [-n N]\n"
               "         [--temp T] [--top-k K] [--top-p P] [--min-p M] [--repeat-penalty R]\n"
               "         [--repeat-last-n N] [--seed S] [--threads N] [--ignore-eos] [--json]\n"
               "         [--json-schema FILE [--json-free-whitespace]] [--device cpu|cuda|cuda:N] [--kv-type f16|f32]\n"
               "         [--spec | --no-spec] [--draft-model PATH] [--draft-max K] [--prediction TEXT]\n"
               "  -n N             tokens to generate at most (default 128)\n"
               "  --temp T         0 = greedy (default 0)\n"
               "  --prompt-ids     token ids, comma-separated, used as given (no BOS added)\n"
               "  --json-schema    constrain the output to one JSON value matching this JSON Schema\n"
               "                   (compact: at most one space after ':' and ','; --json-free-whitespace\n"
               "                   allows up to 16 whitespace bytes in every gap)\n"
               "  --device D       where the model runs: cpu (default), cuda, cuda:N (no fallback)\n"
               "  --kv-type T      element type of the stored K/V: f16 (cpu default) or f32 (cuda's only)\n"
               "  --spec, --no-spec  speculative decoding on (default) or off; the output is the same\n"
               "                   either way (docs/speculative.md), only the speed differs\n"
               "  --draft-model P  a draft model with the same vocabulary proposes tokens (with --spec)\n"
               "  --draft-max K    tokens proposed per step at most (default 16; a draft model 8)\n"
               "  --prediction T   Predicted Output: text the output is expected to resemble (lookup text)\n"
               "  --json           print {prompt_ids, output_ids, text, prompt_tokens_per_s, decode_tokens_per_s,\n"
               "                   accepted_prediction_tokens, rejected_prediction_tokens};\n"
               "                   text is always valid UTF-8: bytes of a character cut off at the end (or\n"
               "                   any invalid byte) become U+FFFD; output_ids are the exact tokens\n");
  return f == stdout ? 0 : 2;
}

// s as the body of a JSON string. NOTE: the output is always valid UTF-8: a byte that
// does not belong to a valid UTF-8 sequence (a character cut by the token limit, a lone
// byte token) becomes U+FFFD; output_ids keep the exact tokens.
std::string json_escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = unicode::valid_utf8_len(s, i);
      if (n == 0) { out += "\xEF\xBF\xBD"; ++i; }
      else { out.append(s, i, n); i += n; }
      continue;
    }
    if (c == '"' || c == '\\') { out += '\\'; out += char(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += char(c);
    ++i;
  }
  return out;
}

std::string json_ids(const std::vector<token_id>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

bool parse_ids(const char* text, std::vector<token_id>* out) {
  const char* p = text;
  while (*p) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    if (end == p || v < 0 || v > (1L << 30)) return false;
    out->push_back(token_id(v));
    p = end;
    if (*p == ',') ++p;
    else if (*p) return false;
  }
  return !out->empty();
}

int cmd_generate(int argc, char** argv) {
  const char *model_path = nullptr, *prompt = nullptr, *prompt_ids_arg = nullptr, *schema_path = nullptr;
  const char *draft_path = nullptr, *prediction = nullptr;
  std::string device = "cpu";
  const char* kv_type = nullptr;
  int32_t n_predict = 128, n_threads = 0, spec_max_draft = engine_config{}.spec_max_draft;
  bool json = false, ignore_eos = false, spec = true;
  json_whitespace json_ws = json_whitespace::spaced;
  sampling_params sp;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(stdout);
    if (arg("--model") || arg("-m")) model_path = argv[++i];
    else if (arg("--prompt") || arg("-p")) prompt = argv[++i];
    else if (arg("--prompt-ids")) prompt_ids_arg = argv[++i];
    else if (arg("-n") || arg("--n-predict")) n_predict = std::atoi(argv[++i]);
    else if (arg("--temp")) sp.temperature = float(std::atof(argv[++i]));
    else if (arg("--top-k")) sp.top_k = std::atoi(argv[++i]);
    else if (arg("--top-p")) sp.top_p = float(std::atof(argv[++i]));
    else if (arg("--min-p")) sp.min_p = float(std::atof(argv[++i]));
    else if (arg("--repeat-penalty")) sp.repeat_penalty = float(std::atof(argv[++i]));
    else if (arg("--repeat-last-n")) sp.penalty_last_n = std::atoi(argv[++i]);
    else if (arg("--seed")) sp.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (arg("--threads") || arg("-t")) n_threads = std::atoi(argv[++i]);
    else if (arg("--json-schema")) schema_path = argv[++i];
    else if (arg("--device")) device = argv[++i];
    else if (arg("--kv-type")) kv_type = argv[++i];
    else if (arg("--draft-model")) draft_path = argv[++i];
    else if (arg("--draft-max")) spec_max_draft = std::atoi(argv[++i]);
    else if (arg("--prediction")) prediction = argv[++i];
    else if (!std::strcmp(argv[i], "--spec")) spec = true;
    else if (!std::strcmp(argv[i], "--no-spec")) spec = false;
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--ignore-eos")) ignore_eos = true;
    else if (!std::strcmp(argv[i], "--json-free-whitespace")) json_ws = json_whitespace::free;
    else {
      std::fprintf(stderr, "generate: unknown or incomplete option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!model_path || (!prompt && !prompt_ids_arg) || n_predict < 0 || spec_max_draft < 1) return usage(stderr);
  kv_dtype kv_dt = kv_dtype::f16;
  if (kv_type && !parse_kv_dtype(kv_type, &kv_dt)) {
    std::fprintf(stderr, "generate: --kv-type must be f16 or f32 (got '%s')\n", kv_type);
    return 2;
  }
  if (draft_path && !spec) {
    std::fprintf(stderr, "generate: --draft-model needs speculation (drop --no-spec)\n");
    return 2;
  }

  // The model's shape first (a validation load: no weight copies), to check the prompt against
  // the context and size the engine's KV for this one sequence.
  std::string err;
  std::shared_ptr<const gguf::file> file = gguf::file::open(model_path, &err);
  if (!file) { std::fprintf(stderr, "generate: %s\n", err.c_str()); return 1; }
  auto shape = model::load(file, 1, &err, model::weights::validate);
  if (!shape) { std::fprintf(stderr, "generate: %s: %s\n", model_path, err.c_str()); return 1; }
  const model_hparams hp = shape->hparams();
  shape.reset();
  std::string schema;
  if (schema_path) {
    std::ifstream in(schema_path, std::ios::binary);
    if (!in) { std::fprintf(stderr, "generate: cannot read %s\n", schema_path); return 1; }
    std::stringstream ss;
    ss << in.rdbuf();
    schema = ss.str();
  }

  // NOTE: generate runs the engine itself (one request, stepped here), so it decodes exactly as
  // agentqd does: the same scheduler, speculation (--spec, the default), verifier and sampler.
  engine_config cfg;
  cfg.model_path = model_path;
  cfg.device = device;
  cfg.n_threads = n_threads;
  if (kv_type) cfg.kv_type = kv_type;
  cfg.spec = spec;
  cfg.spec_max_draft = spec_max_draft;
  if (draft_path) cfg.draft_model_path = draft_path;
  cfg.kv_idle_ttl_s = 0;
  cfg.prefix_reuse = false;
  // KV bytes per token in F32 (the larger element); the budget follows once the prompt is known
  const uint64_t kv_bytes_per_token = 2ull * uint64_t(hp.n_layer) * uint64_t(hp.n_head_kv) * uint64_t(hp.head_dim) * 4;
  std::vector<token_id> prompt_ids;
  if (prompt_ids_arg && !parse_ids(prompt_ids_arg, &prompt_ids)) {
    std::fprintf(stderr, "generate: bad --prompt-ids\n");
    return 2;
  }
  {
    // the tokenizer alone, for --prompt (the engine's is the same file's)
    auto tok = tokenizer::load(*file, &err);
    if (!tok) { std::fprintf(stderr, "generate: %s: %s\n", model_path, err.c_str()); return 1; }
    if (!prompt_ids_arg) prompt_ids = tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  for (token_id id : prompt_ids)
    if (id >= hp.n_vocab) { std::fprintf(stderr, "generate: prompt id %d outside the vocabulary\n", id); return 2; }
  if (prompt_ids.empty()) { std::fprintf(stderr, "generate: empty prompt\n"); return 2; }
  const int32_t n_total = int32_t(prompt_ids.size()) + n_predict;
  if (n_total > hp.n_ctx) {
    std::fprintf(stderr, "generate: prompt + n (%d) exceeds the context length %d\n", n_total, hp.n_ctx);
    return 2;
  }
  // KV for the prompt + n + a proposal's slack and a partial block
  cfg.kv_budget_bytes = kv_bytes_per_token * uint64_t(int64_t(n_total) + 2 * cfg.block_size + spec_max_draft);
  if (draft_path) cfg.draft_kv_budget_bytes = std::max<uint64_t>(cfg.draft_kv_budget_bytes, cfg.kv_budget_bytes);

  auto eng = engine::load(cfg, &err);
  if (!eng) {
    std::fprintf(stderr, "generate: %s\n", err.c_str());
    return err.find("vocabulary") != std::string::npos ? 2 : 1;
  }
  token_request req;
  req.prompt = prompt_ids;
  req.max_tokens = n_predict;
  req.sampling = sp;
  req.json_schema = schema;
  req.json_ws = json_ws;
  req.ignore_eos = ignore_eos;
  if (prediction) req.prediction = eng->tokenize(prediction, false, false);
  std::optional<token_result> result;
  token_callbacks cb;
  if (!json)
    cb.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  cb.on_done = [&](token_result r) { result = std::move(r); };
  eng->submit(std::move(req), std::move(cb));
  while (!result) eng->step();
  if (result->finish == finish_reason::error) {
    std::fprintf(stderr, "generate: %s\n", result->error.c_str());
    return result->error.starts_with("json_schema") ? 2 : 1;
  }
  const turn_usage& u = result->usage;
  const std::vector<token_id>& output_ids = result->output_ids;
  // NOTE: the exact bytes of the ids (a character cut by -n stays cut: json_escape marks it).
  const std::string text = eng->detokenize(output_ids);
  const double pp_tps = u.prefill_ms > 0 ? double(prompt_ids.size()) * 1000.0 / u.prefill_ms : 0;
  const double tg_tps = u.decode_ms > 0 && output_ids.size() > 1 ? double(output_ids.size() - 1) * 1000.0 / u.decode_ms : 0;
  if (json) {
    std::printf("{\"prompt_ids\":%s,\"output_ids\":%s,\"text\":\"%s\",\"prompt_tokens_per_s\":%.2f,\"decode_tokens_per_s\":%.2f,"
                "\"accepted_prediction_tokens\":%d,\"rejected_prediction_tokens\":%d}\n",
                json_ids(prompt_ids).c_str(), json_ids(output_ids).c_str(), json_escape(text).c_str(), pp_tps, tg_tps,
                u.n_tokens_draft_accepted, u.n_tokens_draft_rejected);
  } else {
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s | decode: %zu tokens, %.1f tokens/s | speculation: %d accepted, %d rejected\n",
                 prompt_ids.size(), pp_tps, output_ids.size(), tg_tps, u.n_tokens_draft_accepted,
                 u.n_tokens_draft_rejected);
  }
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(generate, "generate text from a prompt (--json for ids, text and tokens/s)", cmd_generate);
