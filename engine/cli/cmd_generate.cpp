// `agentq-engine generate`: run one prompt through the model (CPU, or --device cuda) with the sampler,
// streaming text to stdout and reporting prompt and decode throughput on stderr
// (or one JSON object with --json). The smallest end-to-end path through the engine.
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "backend/backend.h"
#include "cli/commands.h"
#include "gguf/reader.h"
#include "grammar/constraint.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/stream_decoder.h"
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
               "  -n N             tokens to generate at most (default 128)\n"
               "  --temp T         0 = greedy (default 0)\n"
               "  --prompt-ids     token ids, comma-separated, used as given (no BOS added)\n"
               "  --json-schema    constrain the output to one JSON value matching this JSON Schema\n"
               "                   (compact: at most one space after ':' and ','; --json-free-whitespace\n"
               "                   allows up to 16 whitespace bytes in every gap)\n"
               "  --device D       where the model runs: cpu (default), cuda, cuda:N (no fallback)\n"
               "  --kv-type T      element type of the stored K/V: f16 (cpu default) or f32 (cuda's only)\n"
               "  --json           print {prompt_ids, output_ids, text, prompt_tokens_per_s, decode_tokens_per_s};\n"
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int device_failed(const forward_backend& b) {
  std::fprintf(stderr, "generate: the forward pass on %s failed: %s\n", b.device().c_str(),
               b.failure().empty() ? "see above" : b.failure().c_str());
  return 1;
}

int cmd_generate(int argc, char** argv) {
  const char *model_path = nullptr, *prompt = nullptr, *prompt_ids_arg = nullptr, *schema_path = nullptr;
  std::string device = "cpu";
  const char* kv_type = nullptr;
  int32_t n_predict = 128, n_threads = 0;
  bool json = false, ignore_eos = false;
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
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--ignore-eos")) ignore_eos = true;
    else if (!std::strcmp(argv[i], "--json-free-whitespace")) json_ws = json_whitespace::free;
    else {
      std::fprintf(stderr, "generate: unknown or incomplete option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!model_path || (!prompt && !prompt_ids_arg) || n_predict < 0) return usage(stderr);
  kv_dtype kv_dt = kv_dtype::f16;
  if (kv_type && !parse_kv_dtype(kv_type, &kv_dt)) {
    std::fprintf(stderr, "generate: --kv-type must be f16 or f32 (got '%s')\n", kv_type);
    return 2;
  }

  std::string err;
  std::shared_ptr<const gguf::file> file = gguf::file::open(model_path, &err);
  if (!file) { std::fprintf(stderr, "generate: %s\n", err.c_str()); return 1; }
  auto tok = tokenizer::load(*file, &err);
  if (!tok) { std::fprintf(stderr, "generate: %s: %s\n", model_path, err.c_str()); return 1; }
  auto mdl = forward_backend::create(device, file, n_threads, &err);
  if (!mdl) { std::fprintf(stderr, "generate: %s: %s\n", model_path, err.c_str()); return 1; }
  if (kv_type && !mdl->set_kv_type(kv_dt, &err)) { std::fprintf(stderr, "generate: %s\n", err.c_str()); return 2; }
  const model_hparams& hp = mdl->hparams();

  // --json-schema: constrain the output to one JSON value of the schema (grammar/).
  std::unique_ptr<grammar::token_constraint> constraint;
  if (schema_path) {
    std::ifstream in(schema_path, std::ios::binary);
    if (!in) { std::fprintf(stderr, "generate: cannot read %s\n", schema_path); return 1; }
    std::stringstream ss;
    ss << in.rdbuf();
    constraint = grammar::make_json_constraint(ss.str(), grammar::make_vocab_index(tok->pieces(), tok->eog_ids()), &err, json_ws);
    if (!constraint) { std::fprintf(stderr, "generate: %s: %s\n", schema_path, err.c_str()); return 2; }
  }
  std::vector<uint32_t> allowed;

  std::vector<token_id> prompt_ids;
  if (prompt_ids_arg) {
    if (!parse_ids(prompt_ids_arg, &prompt_ids)) { std::fprintf(stderr, "generate: bad --prompt-ids\n"); return 2; }
  } else {
    prompt_ids = tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  for (token_id id : prompt_ids)
    if (id >= hp.n_vocab) { std::fprintf(stderr, "generate: prompt id %d outside the vocabulary\n", id); return 2; }
  if (prompt_ids.empty()) { std::fprintf(stderr, "generate: empty prompt\n"); return 2; }
  const int32_t n_total = int32_t(prompt_ids.size()) + n_predict;
  if (n_total > hp.n_ctx) {
    std::fprintf(stderr, "generate: prompt + n (%d) exceeds the context length %d\n", n_total, hp.n_ctx);
    return 2;
  }

  // One sequence over a contiguous block table.
  const int32_t block_size = engine_config{}.block_size;  // the engine's default
  const int32_t n_blocks = (n_total + block_size - 1) / block_size;
  if (!mdl->alloc_kv(block_size, n_blocks, &err)) { std::fprintf(stderr, "generate: %s\n", err.c_str()); return 1; }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) table[size_t(i)] = i;
  std::vector<float> logits(size_t(hp.n_vocab));

  sampler smp(sp);
  for (token_id id : prompt_ids) smp.accept(id);
  stream_decoder stream(*tok);

  // Prefill in chunks of up to 512 tokens.
  auto t0 = std::chrono::steady_clock::now();
  constexpr int32_t k_chunk = 512;
  for (int32_t done = 0; done < int32_t(prompt_ids.size());) {
    const int32_t n = std::min<int32_t>(k_chunk, int32_t(prompt_ids.size()) - done);
    batch_seq s{table.data(), done, prompt_ids.data() + done, n, false};
    if (mdl->forward({&s, 1}, logits.data()) < 0) return device_failed(*mdl);
    done += n;
  }
  const double prefill_s = seconds_since(t0);

  std::vector<token_id> output_ids;
  std::string text;
  int32_t n_past = int32_t(prompt_ids.size());
  double decode_s = 0;
  int32_t n_decode_steps = 0;
  for (int32_t i = 0; i < n_predict; ++i) {
    if (constraint) {
      constraint->fill_mask(allowed);
      for (int32_t t = 0; t < hp.n_vocab; ++t)
        if (size_t(t / 32) >= allowed.size() || !(allowed[size_t(t / 32)] >> (t % 32) & 1)) logits[size_t(t)] = -INFINITY;
    }
    token_id id = smp.sample(logits.data(), hp.n_vocab);
    if (constraint && id >= 0 && (!constraint->accept(id) || tok->is_eog(id))) break;
    if (id < 0 || (!ignore_eos && tok->is_eog(id))) break;
    smp.accept(id);
    output_ids.push_back(id);
    std::string piece = stream.push(id);
    text += piece;
    if (!json && !piece.empty()) { std::fwrite(piece.data(), 1, piece.size(), stdout); std::fflush(stdout); }
    if (i + 1 == n_predict) break;
    auto t1 = std::chrono::steady_clock::now();
    batch_seq s{table.data(), n_past, &output_ids.back(), 1, false};
    if (mdl->forward({&s, 1}, logits.data()) < 0) return device_failed(*mdl);
    decode_s += seconds_since(t1);
    ++n_decode_steps;
    ++n_past;
  }
  std::string rest = stream.flush();
  text += rest;
  const double pp_tps = prefill_s > 0 ? double(prompt_ids.size()) / prefill_s : 0;
  const double tg_tps = decode_s > 0 ? double(n_decode_steps) / decode_s : 0;
  if (json) {
    std::printf("{\"prompt_ids\":%s,\"output_ids\":%s,\"text\":\"%s\",\"prompt_tokens_per_s\":%.2f,\"decode_tokens_per_s\":%.2f}\n",
                json_ids(prompt_ids).c_str(), json_ids(output_ids).c_str(), json_escape(text).c_str(), pp_tps, tg_tps);
  } else {
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s | decode: %zu tokens, %.1f tokens/s\n", prompt_ids.size(),
                 pp_tps, output_ids.size(), tg_tps);
  }
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(generate, "generate text from a prompt (--json for ids, text and tokens/s)", cmd_generate);
