// Synthetic model files (synthetic.h): a plan of tensors per architecture, in llama.cpp's
// names, filled row by row from a counter-based generator so any thread can make any row.
#include "gguf/synthetic.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include "gguf/copy_circuit.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace agentq::gguf {

namespace k = kernels;

namespace {

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
  std::vector<int64_t> dims;  // ggml order; dims[0] is the row length
  float fill;                 // constant part of every value
  float sigma;                // stddev of the normal part (0: constant)
  const copy_circuit* circuit = nullptr;  // adds its rows on top (copy_heads)
  int64_t n_cols() const { return dims[0]; }
  int64_t n_rows() const {
    int64_t n = 1;
    for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
    return n;
  }
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
  const int64_t n_cols = p.n_cols(), n_rows = p.n_rows();
  const size_t rb = k::row_bytes(p.type, n_cols);
  buf.resize(rb * static_cast<size_t>(n_rows));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t r = r0; r < r1; ++r) {
      if (p.sigma == 0) {
        std::fill(row.begin(), row.end(), p.fill);
      } else {
        normal_row(mix(seed ^ mix(idx * 0x10000001ull + static_cast<uint64_t>(r))), p.sigma, row.data(), n_cols);
        if (p.fill != 0)
          for (auto& v : row) v += p.fill;
      }
      if (p.circuit) p.circuit->overlay(p.name, r, row.data(), n_cols);
      k::quantize_row(p.type, row.data(), buf.data() + static_cast<size_t>(r) * rb, n_cols);
    }
  };
  const int nt = static_cast<int>(std::min<int64_t>(n_threads, n_rows));
  std::vector<std::thread> ts;
  for (int t = 1; t < nt; ++t) ts.emplace_back(work, n_rows * t / nt, n_rows * (t + 1) / nt);
  work(0, n_rows / std::max(nt, 1));
  for (auto& t : ts) t.join();
}

bool has(std::initializer_list<const char*> archs, const std::string& a) {
  for (const char* x : archs)
    if (a == x) return true;
  return false;
}

}  // namespace

const std::vector<std::string>& synthetic_archs() {
  static const std::vector<std::string> a = {"llama",  "qwen2",  "qwen3", "qwen3moe", "smollm3",
                                             "gemma2", "gemma3", "phi3",  "gpt-oss"};
  return a;
}

synthetic_spec parity_spec(const std::string& arch, uint64_t seed, const std::string& vocab) {
  synthetic_spec s;
  s.arch = arch;
  s.shape = "parity";
  s.varied = true;
  s.seed = seed;
  s.vocab = vocab;
  s.type = k::weight_type::f32;
  if (arch == "qwen3") {
    s.head_dim = 96;  // key_length != n_embd / n_head, as Qwen3's real shapes
    s.tied = true;
  } else if (arch == "qwen3moe") {
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 128;
  } else if (arch == "smollm3") {
    s.n_layer = 4;  // layer 3 is NoPE
    s.tied = true;
  } else if (arch == "gemma2") {
    s.n_swa = 8;
    s.tied = true;
  } else if (arch == "gemma3") {
    s.n_embd = 128;
    s.n_layer = 6;  // five local layers and a global one
    s.n_head_kv = 1;
    s.head_dim = 64;
    s.n_ff = 256;
    s.n_swa = 8;
    s.rope_base = 1000000.0f;
    s.tied = true;
  } else if (arch == "phi3") {
    s.n_rot = 48;  // partial rotation, as Phi-4-mini
  } else if (arch == "gpt-oss") {
    s.n_layer = 4;    // local, global, local, global
    s.n_head = 8;     // 8 x 64 = 512 wide q, not n_embd (as the real 64 x 64 over 2880)
    s.head_dim = 64;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 128;
    s.n_swa = 8;
    s.rope_base = 150000.0f;
  }
  return s;
}

bool write_synthetic(const synthetic_spec& sp, const std::string& path, synthetic_result* result, std::string* error) {
  const std::string& arch = sp.arch;
  if (std::find(synthetic_archs().begin(), synthetic_archs().end(), arch) == synthetic_archs().end()) {
    *error = "unknown architecture '" + arch + "'";
    return false;
  }
  const int64_t hd = sp.head_dim > 0 ? sp.head_dim : sp.n_embd / sp.n_head;
  const int64_t n_rot = sp.n_rot > 0 ? sp.n_rot : hd;
  const bool oss = arch == "gpt-oss";
  const bool moe = arch == "qwen3moe" || oss;
  if (moe && (sp.n_expert <= 0 || sp.n_expert_used <= 0 || sp.n_ff_exp <= 0)) {
    *error = arch + " needs n_expert, n_expert_used and n_ff_exp";
    return false;
  }
  if (oss && (sp.n_embd % 32 != 0 || sp.n_ff_exp % 32 != 0)) {
    *error = "gpt-oss's MXFP4 experts need n_embd and n_ff_exp multiples of 32";
    return false;
  }
  std::optional<copy_circuit> circuit;
  if (sp.copy_heads && !(circuit = copy_circuit::make(sp, error))) return false;
  auto voc = file::open(sp.vocab, error);
  if (!voc) return false;
  const value* tokens = voc->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->elem_type != value_type::string || tokens->strs.empty()) {
    *error = sp.vocab + " has no tokenizer.ggml.tokens";
    return false;
  }
  const int64_t n_vocab = static_cast<int64_t>(tokens->strs.size());

  writer w;
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "agentq-synthetic-" + sp.shape + "-" + k::name_of(sp.type));
  w.set_u32("general.file_type", file_type_of(sp.type));
  w.set_u32(a + "context_length", static_cast<uint32_t>(sp.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(sp.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(sp.n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(sp.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(sp.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(sp.n_head_kv));
  if (sp.head_dim > 0) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  }
  w.set_f32(a + "rope.freq_base", sp.rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", arch.rfind("gemma", 0) == 0 ? 1e-6f : 1e-5f);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(n_rot));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(sp.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(sp.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(sp.n_ff_exp));
  }
  if (sp.n_swa > 0 || oss) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(sp.n_swa));
  if (oss) {  // YaRN as the real files (factor 32 over 4096); here 4 over n_ctx / 4
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", 4.0f);
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(std::max(1, sp.n_ctx / 4)));
  }
  // NOTE: caps far below the real 50 / 30 so the tiny model's scores and logits reach tanh's bend.
  if (arch == "gemma2") w.set_f32(a + "attn_logit_softcapping", 2.5f);
  if (arch == "gemma2" || arch == "gemma3") w.set_f32(a + "final_logit_softcapping", 6.0f);
  if (arch == "phi3") {  // LongRoPE: the long factors apply, as context_length > the original
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(std::max(1, sp.n_ctx / 8)));
    w.set_f32(a + "rope.scaling.attn_factor", 1.1902381f);
  }
  for (const auto& [key, val] : voc->metadata())
    if (key.rfind("tokenizer.", 0) == 0 && !(key == "tokenizer.chat_template" && !sp.chat_template.empty()))
      w.set_value(key, val);
  if (!sp.chat_template.empty()) w.set_string("tokenizer.chat_template", sp.chat_template);

  // Tensors in llama.cpp's order. NOTE: sigma 0.02 keeps activations sane through many layers;
  // norms are 1 so the residual stream is exercised as in real models. Varied (parity) models
  // use larger weights and norms of 1 +- 0.1 so logits spread and greedy output varies.
  const bool v = sp.varied;
  // Copy models: every matrix small (the circuit's background), the circuit on top.
  const float s_fixed = circuit ? circuit->background_sigma() : sp.sigma;
  const float s_mat = s_fixed > 0 ? s_fixed : v ? 0.06f : 0.02f;
  const float s_down = s_fixed > 0 ? s_fixed : v ? 0.04f : 0.02f;
  const float s_embd = s_fixed > 0 ? s_fixed : v ? 0.5f : 0.02f;
  const float s_norm = v ? 0.1f : 0.0f, s_bias = v ? 0.1f : 0.02f;
  // NOTE: a tied output scores each token by its embedding, so when the token's own embedding
  // dominates the residual stream greedy decoding repeats the input token. Tied parity models
  // keep embeddings small beside the layers' outputs (Gemma scales them by sqrt(n_embd)) and
  // scale the final norm up instead, which keeps the logits spread (~2) without that echo.
  const bool gemma = arch.rfind("gemma", 0) == 0;
  float s_embd_used = s_embd, out_norm_fill = 1.0f;
  if (v && sp.tied) {
    s_embd_used = gemma ? 0.15f / std::sqrt(static_cast<float>(sp.n_embd)) : 0.05f;
    out_norm_fill = gemma ? 13.0f : 2.5f;
  }
  const int64_t n_embd = sp.n_embd, n_q = sp.n_head * hd, n_kv = sp.n_head_kv * hd, n_ff = sp.n_ff;
  std::vector<tensor_plan> plan;
  auto matrix = [&](std::string name, std::vector<int64_t> dims, float sigma) {
    plan.push_back({std::move(name), type_for(sp.type, dims[0]), std::move(dims), 0.0f, sigma});
  };
  auto f32 = [&](std::string name, std::vector<int64_t> dims, float fill, float sigma) {
    plan.push_back({std::move(name), k::weight_type::f32, std::move(dims), fill, sigma});
  };
  auto norm = [&](std::string name, int64_t n) { f32(std::move(name), {n}, 1.0f, s_norm); };
  matrix("token_embd.weight", {n_embd, n_vocab}, s_embd_used);
  if (arch == "phi3") {
    f32("rope_factors_long.weight", {n_rot / 2}, 1.5f, 0.2f);
    f32("rope_factors_short.weight", {n_rot / 2}, 1.0f, 0.05f);
  }
  for (int32_t l = 0; l < sp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", n_embd);
    if (arch == "phi3") {
      matrix(p + "attn_qkv.weight", {n_embd, n_q + 2 * n_kv}, s_mat);
    } else {
      matrix(p + "attn_q.weight", {n_embd, n_q}, s_mat);
      matrix(p + "attn_k.weight", {n_embd, n_kv}, s_mat);
      matrix(p + "attn_v.weight", {n_embd, n_kv}, s_mat);
    }
    if (arch == "qwen2" || oss) {
      f32(p + "attn_q.bias", {n_q}, 0.0f, s_bias);
      f32(p + "attn_k.bias", {n_kv}, 0.0f, s_bias);
      f32(p + "attn_v.bias", {n_kv}, 0.0f, s_bias);
    }
    if (has({"qwen3", "qwen3moe", "gemma3"}, arch)) {
      norm(p + "attn_q_norm.weight", hd);
      norm(p + "attn_k_norm.weight", hd);
    }
    matrix(p + "attn_output.weight", {n_q, n_embd}, s_mat);
    if (has({"gemma2", "gemma3"}, arch)) norm(p + "post_attention_norm.weight", n_embd);
    if (oss) {
      // NOTE: sinks around the scores' scale, so some heads attend partly to nothing; experts
      // in MXFP4 whatever the file's type (as the real files: the rest is often BF16/F32).
      f32(p + "attn_output.bias", {n_embd}, 0.0f, s_bias);
      f32(p + "attn_sinks.weight", {sp.n_head}, 0.0f, v ? 1.0f : 0.1f);
      norm(p + "post_attention_norm.weight", n_embd);
      f32(p + "ffn_gate_inp.weight", {n_embd, sp.n_expert}, 0.0f, v ? 0.1f : 0.02f);
      f32(p + "ffn_gate_inp.bias", {sp.n_expert}, 0.0f, s_bias);
      const auto mx = k::weight_type::mxfp4;
      plan.push_back({p + "ffn_gate_exps.weight", mx, {n_embd, sp.n_ff_exp, sp.n_expert}, 0.0f, s_mat});
      f32(p + "ffn_gate_exps.bias", {sp.n_ff_exp, sp.n_expert}, 0.0f, s_bias);
      plan.push_back({p + "ffn_down_exps.weight", mx, {sp.n_ff_exp, n_embd, sp.n_expert}, 0.0f, s_down});
      f32(p + "ffn_down_exps.bias", {n_embd, sp.n_expert}, 0.0f, s_bias);
      plan.push_back({p + "ffn_up_exps.weight", mx, {n_embd, sp.n_ff_exp, sp.n_expert}, 0.0f, s_mat});
      f32(p + "ffn_up_exps.bias", {sp.n_ff_exp, sp.n_expert}, 0.0f, s_bias);
      continue;
    }
    norm(p + "ffn_norm.weight", n_embd);
    if (moe) {
      f32(p + "ffn_gate_inp.weight", {n_embd, sp.n_expert}, 0.0f, v ? 0.1f : 0.02f);
      matrix(p + "ffn_gate_exps.weight", {n_embd, sp.n_ff_exp, sp.n_expert}, s_mat);
      matrix(p + "ffn_down_exps.weight", {sp.n_ff_exp, n_embd, sp.n_expert}, s_down);
      matrix(p + "ffn_up_exps.weight", {n_embd, sp.n_ff_exp, sp.n_expert}, s_mat);
    } else if (arch == "phi3") {
      matrix(p + "ffn_up.weight", {n_embd, 2 * n_ff}, s_mat);
      matrix(p + "ffn_down.weight", {n_ff, n_embd}, s_down);
    } else {
      matrix(p + "ffn_gate.weight", {n_embd, n_ff}, s_mat);
      matrix(p + "ffn_down.weight", {n_ff, n_embd}, s_down);
      matrix(p + "ffn_up.weight", {n_embd, n_ff}, s_mat);
    }
    if (has({"gemma2", "gemma3"}, arch)) norm(p + "post_ffw_norm.weight", n_embd);
  }
  f32("output_norm.weight", {n_embd}, out_norm_fill, s_norm * out_norm_fill);
  if (!sp.tied) matrix("output.weight", {n_embd, n_vocab}, s_mat);

  if (circuit)
    for (auto& p : plan) p.circuit = &*circuit;
  for (const auto& p : plan) w.add_tensor(p.name, static_cast<tensor_type>(static_cast<uint32_t>(p.type)), p.dims);
  if (!w.open(path, error)) return false;
  // Generate tensor i+1 while tensor i is written.
  uint64_t total = 0;
  std::vector<uint8_t> cur, next;
  const int nt = std::max(1, sp.n_threads);
  generate(plan[0], sp.seed, 0, nt, cur);
  for (size_t i = 0; i < plan.size(); ++i) {
    std::future<void> gen;
    if (i + 1 < plan.size())
      gen = std::async(std::launch::async, [&, i] { generate(plan[i + 1], sp.seed, i + 1, nt, next); });
    const bool ok = w.write_tensor_data(cur.data(), cur.size(), error);
    if (gen.valid()) gen.get();
    if (!ok) return false;
    total += cur.size();
    std::swap(cur, next);
  }
  if (!w.close(error)) return false;
  if (result) *result = {plan.size(), total, n_vocab};
  return true;
}

}  // namespace agentq::gguf
