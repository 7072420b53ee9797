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
#include "cuda_ref_forward.h"
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
using test::cuda_ref::ref_forward;

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
