// agentq-mkgguf: writes a synthetic GGUF of any architecture the engine runs, with deterministic
// pseudo-random weights and a real tokenizer copied from a vocab GGUF (tests, benchmarks, parity).
//   agentq-mkgguf --out PATH --shape {tiny,presets,15m,110m,1b,8b,moe,parity} --type {f32,f16,bf16,q8_0,q4_k,q6_k,q4_0,q4_1,q5_0,q5_1,q5_k,mxfp4,iq4_nl,iq4_xs,q2_k,q3_k}
//                 [--vocab VOCAB_GGUF] [--seed N] [--arch ARCH] [--threads N] [--sigma S]
// --shape parity: the per-architecture shape of the llama.cpp parity tests (gguf/synthetic.cpp).
// --shape SHAPE-copy (e.g. 110m-copy, llama): the same tensors with hand-built induction heads
// over small random weights, so greedy decoding copies its context (gguf/copy_circuit.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/synthetic.h"

namespace k = agentq::kernels;
namespace g = agentq::gguf;

namespace {

struct shape {
  const char* name;
  int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
  float rope_base;
  bool tied = false;  // no output.weight: the output projection is token_embd (as Qwen2.5-0.5B)
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // MoE shapes (qwen3moe, gpt-oss)
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
    // Qwen3-30B-A3B's expert ratio (8 of 128, expert width 768 there; 512 here, a multiple of
    // 256 for the k-quants) at a ~1.3B-total, ~0.2B-active size.
    {"moe", 1024, 8, 16, 4, 4096, 4096, 1000000.0f, false, 128, 8, 512},
};

int usage() {
  std::string archs;
  for (const auto& a : g::synthetic_archs()) archs += (archs.empty() ? "" : "|") + a;
  std::fprintf(stderr,
               "usage: agentq-mkgguf --out PATH --shape {tiny,presets,15m,110m,1b,8b,moe,parity}[-copy] --type {f32,f16,bf16,q8_0,q4_k,q6_k,q4_0,q4_1,q5_0,q5_1,q5_k,mxfp4,iq4_nl,iq4_xs,q2_k,q3_k}\n"
               "                     [--vocab VOCAB_GGUF] [--seed N] [--arch %s] [--threads N] [--sigma S]\n",
               archs.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, shape_name, type_name, arch = "llama";
  std::string vocab = "../shared/models/vocab/ggml-vocab-llama-spm.gguf";
  if (const char* sd = std::getenv("AGENTQ_SHARED_DIR")) vocab = std::string(sd) + "/models/vocab/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(vocab)) vocab = "/work/shared/models/vocab/ggml-vocab-llama-spm.gguf";
  uint64_t seed = 1;
  float sigma = 0.0f;  // > 0: stddev of the matrices; larger makes a tiny model's greedy output vary
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
  // NOTE: a shape suffix, not a flag, so scripts/bench/model.sh caches it under its own name.
  const bool copy = shape_name.size() > 5 && shape_name.compare(shape_name.size() - 5, 5, "-copy") == 0;
  const std::string base_shape = copy ? shape_name.substr(0, shape_name.size() - 5) : shape_name;
  const shape* sh = nullptr;
  for (const auto& s : shapes)
    if (base_shape == s.name) sh = &s;
  k::weight_type wt = k::weight_type::f32;
  bool type_ok = false;
  for (auto t : {k::weight_type::f32, k::weight_type::f16, k::weight_type::bf16, k::weight_type::q8_0,
                 k::weight_type::q4_k, k::weight_type::q6_k, k::weight_type::q4_0, k::weight_type::q4_1,
                 k::weight_type::q5_0, k::weight_type::q5_1, k::weight_type::q5_k, k::weight_type::mxfp4,
                 k::weight_type::iq4_nl, k::weight_type::iq4_xs, k::weight_type::q2_k, k::weight_type::q3_k})
    if (type_name == k::name_of(t)) { wt = t; type_ok = true; }
  const auto& archs = g::synthetic_archs();
  const bool parity = shape_name == "parity";
  if (copy && (parity || arch != "llama")) {
    std::fprintf(stderr, "agentq-mkgguf: -copy shapes are llama shapes\n");
    return 2;
  }
  if (out.empty() || (!sh && !parity) || !type_ok || !(sigma >= 0) || std::find(archs.begin(), archs.end(), arch) == archs.end())
    return usage();
  // MoE needs experts: of the bench shapes only "moe" has them (and only MoE architectures take it).
  const bool moe_arch = arch == "qwen3moe" || arch == "gpt-oss";
  if (!parity && moe_arch != (sh->n_expert > 0)) {
    std::fprintf(stderr, "agentq-mkgguf: %s: %s\n", arch.c_str(),
                 moe_arch ? "only --shape parity and --shape moe have experts" : "--shape moe is for MoE architectures");
    return 2;
  }

  g::synthetic_spec spec = g::parity_spec(arch, seed, vocab);
  if (!parity) {
    spec = g::synthetic_spec{};
    spec.arch = arch;
    spec.shape = shape_name;
    spec.copy_heads = copy;
    spec.n_embd = sh->n_embd;
    spec.n_layer = sh->n_layer;
    spec.n_head = sh->n_head;
    spec.n_head_kv = sh->n_head_kv;
    spec.n_ff = sh->n_ff;
    spec.n_ctx = sh->n_ctx;
    spec.rope_base = sh->rope_base;
    spec.tied = sh->tied;
    spec.n_expert = sh->n_expert;
    spec.n_expert_used = sh->n_expert_used;
    spec.n_ff_exp = sh->n_ff_exp;
    // Gemma 3's (1B) sliding window on its local layers; gpt-oss's 128.
    if (arch == "gemma3" || arch == "gemma2") spec.n_swa = 512;
    if (arch == "gpt-oss") spec.n_swa = 128;
    spec.seed = seed;
    spec.vocab = vocab;
  }
  spec.type = wt;
  spec.sigma = sigma;
  spec.n_threads = n_threads;
  const auto t0 = std::chrono::steady_clock::now();
  g::synthetic_result res;
  std::string err;
  if (!g::write_synthetic(spec, out, &res, &err)) {
    std::fprintf(stderr, "agentq-mkgguf: %s\n", err.c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %s %s %s, %zu tensors, %.1f MiB of weights, vocab %lld, %.1f s\n", out.c_str(), arch.c_str(),
              spec.shape.c_str(), k::name_of(wt), res.n_tensors, static_cast<double>(res.n_bytes) / (1 << 20),
              static_cast<long long>(res.n_vocab), s);
  return 0;
}
