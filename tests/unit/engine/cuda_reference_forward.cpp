// The CUDA forward pass's sequence of ops, run on the CPU with the kernels' plain C++ references
// (kernels/cuda/*.cpp) over each family's layer_stack (describe_model), against the CPU engine:
// the same steps in the same order as backend/cuda_forward.cpp's launch_step (embedding scale,
// QKV with fused row views, biases, Q/K norms, rope_kv_write_table from the stack's tables, q scale,
// attention with windows / soft-caps / sinks, output bias and post-norm, GeGLU / SwiGLU / MoE with
// moe_topk, moe_matvec (prefill: grouped by expert with moe_group), expert biases, clamped SwiGLU
// and moe_combine, final soft-cap). No GPU is
// needed: this checks that the ops the CUDA pass chains compose into the CPU engine's model for
// every registered family, so the gpu tests (kernels vs these references, the pass vs the CPU) check
// the rest. Prompts longer than the synthetic windows (8), prefill then greedy decode. And the same
// ops over windowed KV pages (the CUDA backend's layout and page map) against the windowed CPU engine.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "gguf/reader.h"
#include "gguf/synthetic.h"
#include "kv/block_pool.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "model/transformer.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;
namespace ref = agentq::kernels::ref;
namespace cu = agentq::kernels::cuda;

namespace {

constexpr int32_t k_block_size = 16;

// A matrix as the CUDA pass sees it: the file's bytes, type and shape (a row view for fused tensors).
struct mat {
  cu::weight_type type = cu::weight_type::f32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  mat rows(int64_t first, int64_t n) const {
    mat v = *this;
    v.data = data + size_t(first) * cu::row_bytes(type, n_in);
    v.n_out = n;
    return v;
  }
};
mat view(const weight& w) {
  return w ? mat{static_cast<cu::weight_type>(static_cast<int32_t>(w.type)), w.data, w.n_in, w.n_out} : mat{};
}
void linear(const mat& w, const float* x, int32_t n_x, float* y) {
  ref::matvec(w.type, w.data, w.n_out, w.n_in, x, n_x, y);
}
const float* ptr(const std::vector<float>& v) {
  return v.empty() ? nullptr : v.data();
}

// The ops of cuda_forward's launch_step over one sequence's new tokens (positions n_past..), K/V in
// host blocks laid out as the device's ([layer][block][block_size][n_kv * hd], F32, contiguous table).
class ref_forward {
 public:
  explicit ref_forward(const layer_stack& d, int32_t n_blocks) : d_(d), n_blocks_(n_blocks) {
    const auto& hp = d.hp;
    block_floats_ = int64_t(k_block_size) * hp.n_head_kv * hp.head_dim;
    kc_.assign(size_t(hp.n_layer) * n_blocks * block_floats_, 0.0f);
    vc_ = kc_;
    for (int32_t i = 0; i < n_blocks; ++i) table_.push_back(i);
  }

  // Windowed KV as the CUDA backend holds it: kc_/vc_ become one pool of n_pages pages (one layer's
  // block each), read and written through a block table and the (block, layer) -> page map
  // forward() is given.
  void use_pages(int32_t n_pages) {
    kc_.assign(size_t(n_pages) * block_floats_, 0.0f);
    vc_ = kc_;
    paged_ = true;
  }

  // Logits of the last new token. table: the sequence's block ids (default: 0, 1, 2, ...);
  // page_map: windowed KV's [block][layer] pages (after use_pages).
  std::vector<float> forward(const std::vector<token_id>& tokens, int32_t n_past,
                             const std::vector<int32_t>* table = nullptr, const int32_t* page_map = nullptr) {
    const int32_t* tab = table ? table->data() : table_.data();
    const int32_t max_blocks = table ? int32_t(table->size()) : n_blocks_;
    const auto& hp = d_.hp;
    const int32_t n_x = int32_t(tokens.size()), n_embd = hp.n_embd, hd = hp.head_dim, n_head = hp.n_head,
                  n_kv = hp.n_head_kv, n_q = n_head * hd, n_kvd = n_kv * hd, n_ff = hp.n_ff;
    const int32_t k_used = d_.n_expert_used, n_exp = d_.n_expert, n_ff_e = d_.n_ff_exp, n_moe = n_x * k_used;
    std::vector<int32_t> ids(tokens.begin(), tokens.end()), pos, tok_seq(size_t(n_x), 0);
    for (int32_t t = 0; t < n_x; ++t) pos.push_back(n_past + t);
    std::vector<float> x(size_t(n_x) * n_embd), xb(x.size()), q(size_t(n_x) * n_q), k(size_t(n_x) * n_kvd), v(k.size()),
        att(q.size()), hb(size_t(n_x) * std::max(n_ff, 1)), hb2(hb.size());
    const mat tok_embd = view(d_.tok_embd);
    ref::embedding(tok_embd.type, tok_embd.data, ids.data(), n_x, n_embd, x.data());
    if (d_.embd_scale != 0.0f) ref::scale(x.data(), d_.embd_scale, int64_t(n_x) * n_embd);
    const float att_scale = d_.q_scale != 0.0f ? 1.0f : 1.0f / std::sqrt(float(hd));
    const auto gating =
        d_.gating == moe_gating::softmax_topk ? cu::moe_gating::topk_softmax : cu::moe_gating::softmax_norm;
    // x += [post](W a [+ b]), as cuda_forward::residual_out
    auto residual_out = [&](const mat& w, const std::vector<float>& b, const std::vector<float>& post, const float* a) {
      std::vector<float> tmp(size_t(n_x) * w.n_out);
      linear(w, a, n_x, tmp.data());
      if (!b.empty()) ref::add_rows(tmp.data(), b.data(), n_x, int32_t(w.n_out));
      if (!post.empty()) ref::rms_norm(tmp.data(), post.data(), tmp.data(), n_x, int32_t(w.n_out), hp.rms_eps);
      ref::add(x.data(), tmp.data(), int64_t(tmp.size()));
    };
    for (int32_t il = 0; il < hp.n_layer; ++il) {
      const layer_desc& L = d_.layers[size_t(il)];
      float* k_cache = kc_.data() + (paged_ ? 0 : size_t(il) * n_blocks_ * block_floats_);
      float* v_cache = vc_.data() + (paged_ ? 0 : size_t(il) * n_blocks_ * block_floats_);
      const cu::kv_page_map pages = paged_ ? cu::kv_page_map{page_map, hp.n_layer, il} : cu::kv_page_map{};
      ref::rms_norm(x.data(), L.attn_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
      mat wq = view(L.wq), wk = view(L.wk), wv = view(L.wv);
      if (L.wqkv) {
        const mat qkv = view(L.wqkv);
        wq = qkv.rows(0, n_q), wk = qkv.rows(n_q, n_kvd), wv = qkv.rows(n_q + n_kvd, n_kvd);
      }
      linear(wq, xb.data(), n_x, q.data());
      linear(wk, xb.data(), n_x, k.data());
      linear(wv, xb.data(), n_x, v.data());
      if (!L.bq.empty()) {
        ref::add_rows(q.data(), L.bq.data(), n_x, n_q);
        ref::add_rows(k.data(), L.bk.data(), n_x, n_kvd);
        ref::add_rows(v.data(), L.bv.data(), n_x, n_kvd);
      }
      if (!L.q_norm.empty()) {
        ref::rms_norm(q.data(), L.q_norm.data(), q.data(), n_x * n_head, hd, hp.rms_eps);
        ref::rms_norm(k.data(), L.k_norm.data(), k.data(), n_x * n_kv, hd, hp.rms_eps);
      }
      const float* inv_freq = L.use_rope ? d_.rope_inv_freq[size_t(L.rope_set)].data() : nullptr;
      ref::rope_kv_write_table(q.data(), k.data(), v.data(), pos.data(), tok_seq.data(), tab, max_blocks, n_x,
                               n_head, n_kv, hd, hp.n_rot, hp.rope_neox, inv_freq, d_.rope_mscale, k_block_size,
                               k_cache, v_cache, pages);
      if (d_.q_scale != 0.0f) ref::scale(q.data(), d_.q_scale, int64_t(n_x) * n_q);
      const cu::attention_options ao{L.window, d_.attn_softcap, ptr(L.sinks), pages};
      if (n_x == 1) {
        const int32_t len = n_past + 1;
        ref::attention_decode(q.data(), k_cache, v_cache, tab, max_blocks, &len, 1, n_head, n_kv, hd,
                              k_block_size, att_scale, att.data(), ao);
      } else {
        const int32_t q_start[2] = {0, n_x};
        ref::attention_prefill(q.data(), k_cache, v_cache, tab, max_blocks, q_start, &n_past, 1, n_head, n_kv,
                               hd, k_block_size, att_scale, att.data(), ao);
      }
      residual_out(view(L.wo), L.bo, L.attn_post_norm, att.data());

      ref::rms_norm(x.data(), L.ffn_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
      if (L.moe_router) {
        std::vector<float> router(size_t(n_x) * n_exp), w(static_cast<size_t>(n_moe)), g(size_t(n_moe) * n_ff_e),
            u(g.size()), y(size_t(n_moe) * n_embd);
        std::vector<int32_t> sel(static_cast<size_t>(n_moe));
        linear(view(L.moe_router), xb.data(), n_x, router.data());
        if (!L.moe_router_b.empty()) ref::add_rows(router.data(), L.moe_router_b.data(), n_x, n_exp);
        ref::moe_topk(router.data(), n_x, n_exp, k_used, gating, sel.data(), w.data());
        const mat gs = view(L.moe_gate), us = view(L.moe_up), ds = view(L.moe_down);
        // As the pass: more than one token runs the rows grouped by expert (moe_group's chunks,
        // 8 rows each as the kernel's); rows start as NaN, so a row the grouping missed shows.
        std::vector<int32_t> order(static_cast<size_t>(n_moe)), chunks(1 + 3 * size_t(n_moe + n_exp));
        if (n_x > 1) ref::moe_group(sel.data(), n_moe, n_exp, 8, order.data(), chunks.data());
        auto moe_rows = [&](const mat& m, int64_t n_o, int64_t n_i, const float* in, int32_t x_div, float* out) {
          if (n_x == 1) return ref::moe_matvec(m.type, m.data, n_o, n_i, in, x_div, sel.data(), n_moe, out);
          std::fill(out, out + n_moe * n_o, NAN);
          const size_t rb = cu::row_bytes(m.type, n_i);
          for (int32_t c = 0; c < chunks[0]; ++c)
            for (int32_t j = 0; j < chunks[size_t(3 + 3 * c)]; ++j) {
              const int32_t e = chunks[size_t(1 + 3 * c)], r = order[size_t(chunks[size_t(2 + 3 * c)] + j)];
              ref::matvec(m.type, m.data + size_t(e) * size_t(n_o) * rb, n_o, n_i, in + int64_t(r / x_div) * n_i, 1,
                          out + int64_t(r) * n_o);
            }
        };
        moe_rows(gs, n_ff_e, n_embd, xb.data(), k_used, g.data());
        moe_rows(us, n_ff_e, n_embd, xb.data(), k_used, u.data());
        if (!L.moe_gate_b.empty()) {
          ref::add_rows_by_id(g.data(), L.moe_gate_b.data(), sel.data(), n_moe, n_ff_e);
          ref::add_rows_by_id(u.data(), L.moe_up_b.data(), sel.data(), n_moe, n_ff_e);
        }
        if (d_.moe_act == ffn_act::swiglu_oai)
          ref::swiglu_oai(g.data(), u.data(), g.data(), int64_t(g.size()));
        else
          ref::swiglu(g.data(), u.data(), g.data(), int64_t(g.size()));
        moe_rows(ds, n_embd, n_ff_e, g.data(), 1, y.data());
        if (!L.moe_down_b.empty()) ref::add_rows_by_id(y.data(), L.moe_down_b.data(), sel.data(), n_moe, n_embd);
        ref::moe_combine(y.data(), w.data(), n_x, k_used, n_embd, xb.data());
        if (!L.ffn_post_norm.empty())
          ref::rms_norm(xb.data(), L.ffn_post_norm.data(), xb.data(), n_x, n_embd, hp.rms_eps);
        ref::add(x.data(), xb.data(), int64_t(xb.size()));
        continue;
      }
      mat wg = view(L.w_gate), wu = view(L.w_up);
      if (L.w_gate_up) {
        const mat gu = view(L.w_gate_up);
        wg = gu.rows(0, n_ff), wu = gu.rows(n_ff, n_ff);
      }
      linear(wg, xb.data(), n_x, hb.data());
      linear(wu, xb.data(), n_x, hb2.data());
      if (d_.act == ffn_act::gelu_tanh)
        ref::gelu_mul(hb.data(), hb2.data(), hb.data(), int64_t(n_x) * n_ff);
      else
        ref::swiglu(hb.data(), hb2.data(), hb.data(), int64_t(n_x) * n_ff);
      residual_out(view(L.w_down), {}, L.ffn_post_norm, hb.data());
    }
    std::vector<float> row(static_cast<size_t>(n_embd)), logits(static_cast<size_t>(hp.n_vocab));
    ref::rms_norm(x.data() + size_t(n_x - 1) * n_embd, d_.output_norm.data(), row.data(), 1, n_embd, hp.rms_eps);
    linear(view(d_.output), row.data(), 1, logits.data());
    if (d_.final_softcap != 0.0f) ref::softcap(logits.data(), d_.final_softcap, hp.n_vocab);
    return logits;
  }

 private:
  const layer_stack& d_;
  int32_t n_blocks_;
  int64_t block_floats_ = 0;
  std::vector<float> kc_, vc_;
  std::vector<int32_t> table_;
  bool paged_ = false;
};

// The CUDA backend's windowed KV memory without its data (ref_forward holds that): the page table
// the block pool fills.
class page_memory final : public kv_memory {
 public:
  page_memory(kv_layout l, int32_t n_blocks) : layout_(l), table_(l, n_blocks) {}
  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return table_.n_block_ids(); }
  kv_page_table* pages() override { return &table_; }
  void copy_rows(int32_t, int32_t, int32_t) override { FAIL("no copy-on-write expected"); }
  bool read_blocks(std::span<const int32_t>, void*, bool) override { return false; }
  bool write_blocks(std::span<const int32_t>, const void*, bool) override { return false; }

 private:
  kv_layout layout_;
  kv_page_table table_;
};

token_id argmax(const float* v, int32_t n) {
  token_id best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace

TEST_CASE("the CUDA pass's ops, run as references, give the CPU engine's logits for every family") {
  const fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing (the shared data beside the checkout)");
  const fs::path dir = fs::temp_directory_path() / ("agentq_cuda_ref_forward_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& arch : gguf::synthetic_archs()) {
    CAPTURE(arch);
    const fs::path path = dir / (arch + ".gguf");
    std::string err;
    REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(arch, 25, vocab.string()), path.string(), nullptr, &err),
                    err);
    std::shared_ptr<const gguf::file> f = gguf::file::open(path.string(), &err);
    REQUIRE_MESSAGE(f, err);
    fs::remove(path);
    const weight_store views;  // as cuda_forward: the file's bytes and types
    layer_stack d;
    REQUIRE_MESSAGE(describe_model(*f, views, &d, &err), err);
    auto cpu = model::load(f, 2, &err);
    REQUIRE_MESSAGE(cpu, err);
    constexpr int32_t n_blocks = 4;  // 64 positions
    kv_store kv(cpu->kv_layout_for(k_block_size, kv_dtype::f32), n_blocks);
    std::vector<int32_t> table = {0, 1, 2, 3};
    ref_forward gpu_ops(d, n_blocks);
    const int32_t n_vocab = d.hp.n_vocab;
    std::vector<token_id> prompt;
    for (int32_t i = 0; i < 21; ++i) prompt.push_back(token_id(100 + 37 * i));
    std::vector<float> lc(static_cast<size_t>(n_vocab));
    batch_seq s{table.data(), 0, prompt.data(), int32_t(prompt.size()), false};
    REQUIRE(cpu->forward({&s, 1}, kv, lc.data()) == 1);
    std::vector<float> lr = gpu_ops.forward(prompt, 0);
    // NOTE: gpt-oss's MXFP4 experts: the CPU rounds their activations to Q8_0 (as llama.cpp), the
    // references do not (measured 0.030). Gemma's GELU goes through F16, where an ulp of tanh moves a
    // rounding step (measured 1.8e-3). The others differ by float summation order only (~1e-5).
    const float tol = arch == "gpt-oss" ? 5e-2f : arch.starts_with("gemma") ? 5e-3f : 2e-4f;
    float worst = 0;
    int32_t n_same = 0;
    for (int32_t step = 0; step < 24; ++step) {
      CAPTURE(step);
      float diff = 0;
      for (int32_t i = 0; i < n_vocab; ++i) diff = std::max(diff, std::fabs(lc[size_t(i)] - lr[size_t(i)]));
      worst = std::max(worst, diff);
      CHECK(diff <= tol);
      const token_id next = argmax(lc.data(), n_vocab);
      n_same += argmax(lr.data(), n_vocab) == next;
      s = batch_seq{table.data(), int32_t(prompt.size()) + step, &next, 1, false};
      REQUIRE(cpu->forward({&s, 1}, kv, lc.data()) == 1);
      lr = gpu_ops.forward({next}, int32_t(prompt.size()) + step);
    }
    MESSAGE(arch, ": largest logit difference ", worst, ", same greedy token at ", n_same, " of 24 steps");
    CHECK(n_same >= 22);  // a near tie may differ
  }
  fs::remove_all(dir);
}

// Windowed KV (#25): the same ops over the CUDA backend's page layout (one page pool, the block
// pool's (block, layer) -> page map) in a pool too small for every layer whole, against the CPU
// engine holding windowed F32 KV in its own pool of the same size: far past the windows, blocks
// leave them and their windowed pages are recycled.
TEST_CASE("the CUDA pass's ops over windowed KV pages give the CPU engine's logits") {
  const fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing (the shared data beside the checkout)");
  const fs::path dir = fs::temp_directory_path() / ("agentq_cuda_ref_windowed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string arch : {"gemma3", "gpt-oss"}) {
    CAPTURE(arch);
    const fs::path path = dir / (arch + ".gguf");
    std::string err;
    REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(arch, 25, vocab.string()), path.string(), nullptr, &err),
                    err);
    std::shared_ptr<const gguf::file> f = gguf::file::open(path.string(), &err);
    REQUIRE_MESSAGE(f, err);
    fs::remove(path);
    const weight_store views;
    layer_stack d;
    REQUIRE_MESSAGE(describe_model(*f, views, &d, &err), err);
    auto cpu = model::load(f, 2, &err);
    REQUIRE_MESSAGE(cpu, err);
    // 6 blocks' memory; 40 + 60 positions need 7 blocks in the full layers
    constexpr int32_t n_blocks = 6;
    const kv_layout cpu_layout = cpu->kv_layout_for(k_block_size, kv_dtype::f32, true);
    kv_layout dev_layout{d.hp.n_layer, d.hp.n_head_kv, d.hp.head_dim, k_block_size, kv_dtype::f32};  // CUDA's
    dev_layout = model::with_layer_windows(dev_layout, d.hp);
    REQUIRE(dev_layout.window == 8);
    REQUIRE(dev_layout.layer_windowed == cpu_layout.layer_windowed);
    block_pool cpu_pool(cpu_layout, n_blocks);
    page_memory dev_mem(dev_layout, n_blocks);
    block_pool dev_pool(dev_mem);
    ref_forward gpu_ops(d, dev_mem.n_blocks());
    gpu_ops.use_pages(dev_mem.pages()->n_pages());
    ref_forward gpu_full(d, dev_mem.n_blocks());  // every layer whole, the same block tables
    int32_t n_bitwise = 0;
    const int32_t sc = cpu_pool.create_seq(), sd = dev_pool.create_seq();
    const int32_t n_vocab = d.hp.n_vocab;
    std::vector<float> lc(static_cast<size_t>(n_vocab)), lr;
    // one step on both: reserve, forward, commit
    auto step = [&](const std::vector<token_id>& toks) {
      const int32_t n_past = cpu_pool.seq(sc).n_tokens, n = int32_t(toks.size());
      REQUIRE(cpu_pool.reserve(sc, n_past + n));
      REQUIRE(dev_pool.reserve(sd, n_past + n));
      batch_seq s{cpu_pool.seq(sc).blocks.data(), n_past, toks.data(), n, false};
      REQUIRE(cpu->forward({&s, 1}, cpu_pool.store(), lc.data()) == 1);
      lr = gpu_ops.forward(toks, n_past, &dev_pool.seq(sd).blocks, dev_mem.pages()->data());
      // windowed pages change nothing: the same keys in the same order
      const std::vector<float> lf = gpu_full.forward(toks, n_past, &dev_pool.seq(sd).blocks);
      REQUIRE(std::memcmp(lr.data(), lf.data(), lr.size() * 4) == 0);
      ++n_bitwise;
      cpu_pool.set_n_tokens(sc, n_past + n);
      dev_pool.set_n_tokens(sd, n_past + n);
      dev_pool.sanity();
    };
    std::vector<token_id> prompt;
    for (int32_t i = 0; i < 40; ++i) prompt.push_back(token_id(100 + 37 * i));
    step({prompt.begin(), prompt.begin() + 23});
    step({prompt.begin() + 23, prompt.end()});
    const float tol = arch == "gpt-oss" ? 5e-2f : 5e-3f;  // as the test above
    float worst = 0;
    int32_t n_same = 0;
    constexpr int32_t n_steps = 60;
    for (int32_t t = 0; t < n_steps; ++t) {
      CAPTURE(t);
      float diff = 0;
      for (int32_t i = 0; i < n_vocab; ++i) diff = std::max(diff, std::fabs(lc[size_t(i)] - lr[size_t(i)]));
      worst = std::max(worst, diff);
      CHECK(diff <= tol);
      const token_id next = argmax(lc.data(), n_vocab);
      n_same += argmax(lr.data(), n_vocab) == next;
      step({next});
    }
    const int32_t n = dev_pool.seq(sd).n_tokens;
    CHECK(n == 100);
    CHECK(dev_pool.blocks_for_tokens(n) > n_blocks);  // more than every layer whole would fit
    CHECK(dev_pool.n_pages_used() * 2 * dev_layout.block_elem_bytes() == dev_layout.seq_bytes(n));
    CHECK(dev_pool.n_pages_used() == cpu_pool.n_pages_used());
    MESSAGE(arch, " windowed: largest logit difference ", worst, ", same greedy token at ", n_same, " of ", n_steps,
            " steps; pages held ", dev_pool.n_pages_used(), " of ", dev_mem.pages()->n_pages(), "; ", n_bitwise,
            " steps' logits equal to every layer whole bit for bit");
    // NOTE: gpt-oss differs at 2 of 60 (measured): the MXFP4 activations' rounding above, not the
    // pages (every step's logits equal the whole-layer run's bit for bit).
    CHECK(n_same >= n_steps - 2);  // a near tie may differ
  }
  fs::remove_all(dir);
}
