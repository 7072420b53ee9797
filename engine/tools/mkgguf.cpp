// agentq-mkgguf: writes a synthetic Llama/Qwen2-architecture GGUF with deterministic
// pseudo-random weights and a real tokenizer copied from a vocab GGUF (tests, benchmarks).
//   agentq-mkgguf --out PATH --shape {tiny,presets,15m,110m,1b,8b} --type {f32,f16,bf16,q8_0,q4_k,q6_k,q4_0,q4_1,q5_0,q5_1,q5_k,mxfp4,iq4_nl,iq4_xs,q2_k,q3_k}
//                 [--vocab VOCAB_GGUF] [--seed N] [--arch llama|qwen2] [--threads N] [--sigma S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace k = agentq::kernels;
namespace g = agentq::gguf;

namespace {

struct shape {
  const char* name;
  int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
  float rope_base;
  bool tied = false;  // no output.weight: the output projection is token_embd (as Qwen2.5-0.5B)
};

const shape shapes[] = {
    {"tiny", 256, 2, 4, 2, 512, 512, 10000.0f},
    // NOTE: n_embd 64 is not a multiple of 256, so llama-quantize's presets fall back to
    // Q5_0/Q5_1/Q8_0/IQ4_NL for every tensor but ffn_down (256 columns), as for Qwen2.5-0.5B;
    // tiny and tied on purpose (tests/data/presets commits one file per preset).
    {"presets", 64, 2, 2, 1, 256, 512, 10000.0f, true},
    {"15m", 288, 6, 6, 6, 768, 1024, 10000.0f},
    {"110m", 768, 12, 12, 12, 2048, 1024, 10000.0f},
    {"1b", 2048, 16, 32, 8, 8192, 4096, 500000.0f},
    {"8b", 4096, 32, 32, 8, 14336, 8192, 500000.0f},
};

// llama.cpp's LLAMA_FTYPE for a file mostly of type t.
uint32_t file_type_of(k::weight_type t) {
  switch (t) {
    case k::weight_type::f32: return 0;
    case k::weight_type::f16: return 1;
    case k::weight_type::q8_0: return 7;
    case k::weight_type::q4_k: return 15;  // Q4_K_M
    case k::weight_type::q6_k: return 18;
    case k::weight_type::bf16: return 32;
    case k::weight_type::q4_0: return 2;
    case k::weight_type::q4_1: return 3;
    case k::weight_type::q5_0: return 8;
    case k::weight_type::q5_1: return 9;
    case k::weight_type::q5_k: return 17;  // Q5_K_M
    case k::weight_type::mxfp4: return 38;  // MXFP4_MOE
    case k::weight_type::iq4_nl: return 25;
    case k::weight_type::iq4_xs: return 30;
    case k::weight_type::q2_k: return 10;
    case k::weight_type::q3_k: return 12;  // Q3_K_M
    default: break;  // load-time CPU layouts, or types without a quantizer here
  }
  return 0;
}

// splitmix64: a counter-based generator, so each row's values depend only on
// (seed, tensor, row) and rows can be generated in any order on any thread.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately normal(0, sigma): the sum of four 16-bit uniforms (Irwin-Hall),
// centred and scaled to unit variance. NOTE: cheap on purpose — a 1b model has
// ~1.2e9 weights; tails are bounded at 2*sqrt(3) sigma, harmless for synthetic weights.
void normal_row(uint64_t seed, float sigma, float* out, int64_t n) {
  const float scale = sigma * 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = mix(seed + static_cast<uint64_t>(i));
    const int32_t s = static_cast<int32_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) - 2 * 65535;
    out[i] = static_cast<float>(s) * scale;
  }
}

struct tensor_plan {
  std::string name;
  k::weight_type type;
  int64_t n_cols, n_rows;  // dims {n_cols, n_rows}; n_rows == 1 and is_vector for 1-d tensors
  bool is_vector;
  float fill;              // 1-d: constant value (norms) when sigma == 0
  float sigma;             // stddev of the normal weights
};

// A weight type the row length allows: k-quants need 256-element rows, Q8_0 32 (as
// llama.cpp's quantize falls back for such tensors; its mixes pick Q5_0/Q5_1 for some).
k::weight_type type_for(k::weight_type want, int64_t n_cols) {
  if (n_cols % k::block_elems(want) == 0) return want;
  if (n_cols % k::qk8_0 == 0) return k::weight_type::q8_0;
  return k::weight_type::f16;
}

// Generates tensor idx into buf with n_threads threads (row ranges).
void generate(const tensor_plan& p, uint64_t seed, size_t idx, int n_threads, std::vector<uint8_t>& buf) {
  const size_t rb = k::row_bytes(p.type, p.n_cols);
  buf.resize(rb * static_cast<size_t>(p.n_rows));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(p.n_cols));
    for (int64_t r = r0; r < r1; ++r) {
      if (p.sigma == 0) {
        std::fill(row.begin(), row.end(), p.fill);
      } else {
        normal_row(mix(seed ^ mix(idx * 0x10000001ull + static_cast<uint64_t>(r))), p.sigma, row.data(), p.n_cols);
      }
      k::quantize_row(p.type, row.data(), buf.data() + static_cast<size_t>(r) * rb, p.n_cols);
    }
  };
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, p.n_rows));
  std::vector<std::thread> ts;
  for (int t = 1; t < nt; ++t) ts.emplace_back(work, p.n_rows * t / nt, p.n_rows * (t + 1) / nt);
  work(0, p.n_rows / std::max(nt, 1));
  for (auto& t : ts) t.join();
}

int usage() {
  std::fprintf(stderr,
               "usage: agentq-mkgguf --out PATH --shape {tiny,presets,15m,110m,1b,8b} --type {f32,f16,bf16,q8_0,q4_k,q6_k,q4_0,q4_1,q5_0,q5_1,q5_k,mxfp4,iq4_nl,iq4_xs,q2_k,q3_k}\n"
               "                     [--vocab VOCAB_GGUF] [--seed N] [--arch llama|qwen2] [--threads N] [--sigma S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, shape_name, type_name, arch = "llama";
  std::string vocab = "../shared/models/vocab/ggml-vocab-llama-spm.gguf";
  if (const char* sd = std::getenv("AGENTQ_SHARED_DIR")) vocab = std::string(sd) + "/models/vocab/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(vocab)) vocab = "/work/shared/models/vocab/ggml-vocab-llama-spm.gguf";
  uint64_t seed = 1;
  float sigma = 0.02f;  // stddev of the matrices; larger makes a tiny model's greedy output vary
  int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--out") out = v;
    else if (a == "--shape") shape_name = v;
    else if (a == "--type") type_name = v;
    else if (a == "--vocab") vocab = v;
    else if (a == "--seed") seed = std::stoull(v);
    else if (a == "--arch") arch = v;
    else if (a == "--threads") n_threads = std::max(1, std::stoi(v));
    else if (a == "--sigma") sigma = std::stof(v);
    else return usage();
  }
  const shape* sh = nullptr;
  for (const auto& s : shapes)
    if (shape_name == s.name) sh = &s;
  k::weight_type wt = k::weight_type::f32;
  bool type_ok = false;
  for (auto t : {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16, k::weight_type::q8_0,
                 k::weight_type::q4_k, k::weight_type::q6_k, k::weight_type::q4_0, k::weight_type::q4_1,
                 k::weight_type::q5_0, k::weight_type::q5_1, k::weight_type::q5_k, k::weight_type::mxfp4,
                 k::weight_type::iq4_nl, k::weight_type::iq4_xs, k::weight_type::q2_k, k::weight_type::q3_k})
    if (type_name == k::name_of(t)) { wt = t; type_ok = true; }
  if (out.empty() || !sh || !type_ok || !(sigma > 0) || (arch != "llama" && arch != "qwen2")) return usage();

  std::string err;
  auto voc = g::file::open(vocab, &err);
  if (!voc) {
    std::fprintf(stderr, "agentq-mkgguf: vocab: %s\n", err.c_str());
    return 1;
  }
  const g::value* tokens = voc->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->elem_type != g::value_type::string || tokens->strs.empty()) {
    std::fprintf(stderr, "agentq-mkgguf: %s has no tokenizer.ggml.tokens\n", vocab.c_str());
    return 1;
  }
  const int64_t n_vocab = static_cast<int64_t>(tokens->strs.size());
  const int64_t head_dim = sh->n_embd / sh->n_head;

  g::writer w;
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_string("general.name", std::string("agentq-synthetic-") + sh->name + "-" + k::name_of(wt));
  w.set_u32("general.file_type", file_type_of(wt));
  w.set_u32(a + "context_length", static_cast<uint32_t>(sh->n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(sh->n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(sh->n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(sh->n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(sh->n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(sh->n_head_kv));
  w.set_f32(a + "rope.freq_base", sh->rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  for (const auto& [key, val] : voc->metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, val);

  // Tensors in llama.cpp's order. NOTE: sigma 0.02 keeps activations sane through
  // many layers; norms are 1 so the residual stream is exercised as in real models.
  const int64_t n_embd = sh->n_embd, n_q = sh->n_head * head_dim, n_kv = sh->n_head_kv * head_dim;
  std::vector<tensor_plan> plan;
  auto matrix = [&](std::string name, int64_t n_cols, int64_t n_rows) {
    plan.push_back({std::move(name), type_for(wt, n_cols), n_cols, n_rows, false, 0.0f, sigma});
  };
  auto vec = [&](std::string name, int64_t n, float fill, float sigma) {
    plan.push_back({std::move(name), k::weight_type::f32, n, 1, true, fill, sigma});
  };
  matrix("token_embd.weight", n_embd, n_vocab);
  for (int32_t l = 0; l < sh->n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", n_embd, 1.0f, 0.0f);
    matrix(p + "attn_q.weight", n_embd, n_q);
    matrix(p + "attn_k.weight", n_embd, n_kv);
    matrix(p + "attn_v.weight", n_embd, n_kv);
    if (arch == "qwen2") {
      vec(p + "attn_q.bias", n_q, 0.0f, 0.02f);
      vec(p + "attn_k.bias", n_kv, 0.0f, 0.02f);
      vec(p + "attn_v.bias", n_kv, 0.0f, 0.02f);
    }
    matrix(p + "attn_output.weight", n_q, n_embd);
    vec(p + "ffn_norm.weight", n_embd, 1.0f, 0.0f);
    matrix(p + "ffn_gate.weight", n_embd, sh->n_ff);
    matrix(p + "ffn_down.weight", sh->n_ff, n_embd);
    matrix(p + "ffn_up.weight", n_embd, sh->n_ff);
  }
  vec("output_norm.weight", n_embd, 1.0f, 0.0f);
  if (!sh->tied) matrix("output.weight", n_embd, n_vocab);

  for (const auto& p : plan) {
    const auto tt = static_cast<g::tensor_type>(static_cast<uint32_t>(p.type));
    if (p.is_vector) w.add_tensor(p.name, tt, {p.n_cols});
    else w.add_tensor(p.name, tt, {p.n_cols, p.n_rows});
  }
  if (!w.open(out, &err)) {
    std::fprintf(stderr, "agentq-mkgguf: %s\n", err.c_str());
    return 1;
  }
  // Generate tensor i+1 while tensor i is written.
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0;
  std::vector<uint8_t> cur, next;
  generate(plan[0], seed, 0, n_threads, cur);
  for (size_t i = 0; i < plan.size(); ++i) {
    std::future<void> gen;
    if (i + 1 < plan.size())
      gen = std::async(std::launch::async, [&, i] { generate(plan[i + 1], seed, i + 1, n_threads, next); });
    const bool ok = w.write_tensor_data(cur.data(), cur.size(), &err);
    if (gen.valid()) gen.get();
    if (!ok) {
      std::fprintf(stderr, "agentq-mkgguf: %s\n", err.c_str());
      return 1;
    }
    total += cur.size();
    std::swap(cur, next);
  }
  if (!w.close(&err)) {
    std::fprintf(stderr, "agentq-mkgguf: %s\n", err.c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %s %s %s, %zu tensors, %.1f MiB of weights, vocab %lld, %.1f s\n", out.c_str(), arch.c_str(),
              sh->name, k::name_of(wt), plan.size(), static_cast<double>(total) / (1 << 20),
              static_cast<long long>(n_vocab), s);
  return 0;
}
