// Windowed KV on the CUDA backend (the sliding-window layers hold device pages for their window's
// blocks only; attention visits only those), on the synthetic gemma3 and gpt-oss parity models
// (window 8, 16-token blocks), at depths far past the window:
//  - backend level: the CUDA backend with windowed KV in a pool too small for every layer whole
//    (so windowed pages are recycled) against the CUDA backend with every layer whole (same
//    logits bit for bit: the same arithmetic over the same keys) and the CPU backend with windowed
//    F32 KV (logits within the families' CUDA tolerance, greedy tokens equal but at near ties);
//    chunked prefill of two sequences together, then batched greedy decode; the device holds
//    what kv_layout::seq_bytes counts.
//  - engine level: greedy outputs of the windowed CUDA engine equal the full-KV CUDA engine's,
//    batched; a job spilled to disk (the short file: no windowed layers before the window) and
//    restored continues identically and computes only its new tokens.
//  - kernel level: decode and prefill attention and the K/V write through a page map (a shuffled
//    page per (block, layer), holes before the window, every other page NaN) give the kernels'
//    bits over the same blocks stored whole.
// Exits 77 (skipped) without CUDA, without a device, or without the vocab for the models.
// First run on an H200 in session 28 (scripts/device-check.sh runs it).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_env.h"

#if AGENTQ_HAVE_CUDA

#include <numeric>
#include <random>

#include "agentq/kernels_cuda.h"
#include "backend/backend.h"
#include "cuda_device_test.h"
#include "cuda_ref_forward.h"
#include "cuda_test_data.h"
#include "engine_impl.h"
#include "gguf/reader.h"
#include "gguf/synthetic.h"
#include "golden.h"
#include "kv/block_pool.h"

using namespace agentq;
namespace fs = std::filesystem;
namespace ref = agentq::kernels::ref;

namespace {

constexpr int32_t k_block_size = 16;
constexpr float k_near_tie = 5e-3f;  // as cuda_families: a token may differ only at a near tie

fs::path vocab_or_skip() {
  if (kernels::cuda::device_count() == 0) test::skip("no CUDA device");
  fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) vocab = test::source_dir() / "shared" / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing");
  return vocab;
}

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("agentq-cuda-windowed-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string write_model(const std::string& arch, const fs::path& vocab, const fs::path& dir) {
  const fs::path path = dir / (arch + ".gguf");
  std::string err;
  REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(arch, 25, vocab.string()), path.string(), nullptr, &err), err);
  return path.string();
}

// CUDA vs CPU top-5 tolerance of tests/gpu/cuda_families (gpt-oss: the MXFP4 activations' rounding).
float logit_tol(const std::string& arch) { return arch == "gpt-oss" ? 5e-2f : 1e-2f; }
// A row further from the CPU's than logit_tol must equal the CUDA ops' references on the CPU within
// this (test::cuda_ref::ref_forward: cuda_families' check; gpt-oss on the first H200 run: 0.06-0.16
// from the CPU after a MoE routing step its Q8_0 activation rounding moved).
constexpr float k_ref_tol = 2e-3f;

token_id argmax(const float* v, int32_t n) {
  token_id best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

float top_gap(const float* v, int32_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    if (v[i] > a) b = a, a = v[i];
    else if (v[i] > b) b = v[i];
  }
  return a - b;
}

// A backend with its own pool: windowed or not, n_blocks blocks' worth of memory.
struct side {
  std::unique_ptr<forward_backend> be;
  std::unique_ptr<block_pool> pool;
  side(const std::string& device, std::shared_ptr<const gguf::file> f, bool windowed, int32_t n_blocks) {
    std::string err;
    be = forward_backend::create(device, std::move(f), 2, &err);
    REQUIRE_MESSAGE(be, err);
    REQUIRE(be->set_kv_type(kv_dtype::f32, &err));  // the CUDA blocks are F32: the CPU's too, to compare
    REQUIRE(be->set_windowed_kv(windowed));
    REQUIRE_MESSAGE(be->alloc_kv(k_block_size, n_blocks, &err), err);
    pool = std::make_unique<block_pool>(be->kv());
  }
};

std::vector<token_id> prompt(int32_t n, int32_t salt) {
  std::vector<token_id> p = {1};
  for (int32_t i = 1; i < n; ++i) p.push_back(token_id(300 + (i * 37 + salt * 101) % 20000));
  return p;
}

}  // namespace

TEST_CASE("cuda windowed KV kernels: attention and the K/V write through a page map give the whole store's bits") {
  test::require_device();
  namespace cu = kernels::cuda;
  std::mt19937 rng(25);
  const std::vector<int32_t> lens = {700, 1500, 37};
  const int32_t n_seqs = 3, n_head = 8, n_kv = 2, hd = 64, bs = 16, window = 300, n_layer = 3, layer = 1;
  test::paged_fixture f(lens, n_kv, hd, bs, rng);
  const size_t bf = size_t(bs) * n_kv * hd;  // floats per block per layer
  // Pages: every (block, layer) a shuffled page; layer `layer`'s blocks before `from[b]` a hole.
  auto paged = [&](const std::vector<int32_t>& first_key) {
    const int32_t n_pages = f.n_blocks * n_layer;
    std::vector<int32_t> perm(static_cast<size_t>(n_pages)), map(size_t(f.n_blocks) * n_layer, -1);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> k(size_t(n_pages) * bf, NAN), v(k.size(), NAN);
    for (int32_t s = 0; s < n_seqs; ++s)
      for (int32_t i = 0; i < (lens[size_t(s)] + bs - 1) / bs; ++i) {
        const int32_t b = f.block_tables[size_t(s) * f.max_blocks + i];
        for (int32_t l = 0; l < n_layer; ++l) map[size_t(b) * n_layer + l] = perm[size_t(b) * n_layer + l];
        if (i < first_key[size_t(s)] / bs) {
          map[size_t(b) * n_layer + layer] = -1;  // gone: before the window
          continue;
        }
        const int32_t p = map[size_t(b) * n_layer + layer];
        std::copy(f.k.begin() + ptrdiff_t(b * bf), f.k.begin() + ptrdiff_t((b + 1) * bf), k.begin() + ptrdiff_t(p * bf));
        std::copy(f.v.begin() + ptrdiff_t(b * bf), f.v.begin() + ptrdiff_t((b + 1) * bf), v.begin() + ptrdiff_t(p * bf));
      }
    return std::tuple{test::to_device(k), test::to_device(v), test::to_device(map)};
  };
  auto dk = test::to_device(f.k), dv = test::to_device(f.v), dtab = test::to_device(f.block_tables);
  auto dlens = test::to_device(lens);
  const size_t per = size_t(n_head) * hd;
  const float scale = 0.125f;
  // decode: each sequence's window starts at len - window
  {
    std::vector<int32_t> first;
    for (int32_t len : lens) first.push_back(std::max(0, len - window));
    auto [pk, pv, pmap] = paged(first);
    const auto q = test::random_floats(size_t(n_seqs) * per, rng);
    auto dq = test::to_device(q);
    cu::device_buffer ws(cu::attention_decode_workspace_floats(n_seqs, n_head, hd, 1600) * 4), o1(q.size() * 4),
        o2(q.size() * 4);
    cu::attention_options whole{window, 0.0f, nullptr, {}}, pages{window, 0.0f, nullptr, {pmap.as<int32_t>(), n_layer, layer}};
    cu::attention_decode(dq.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                         dlens.as<int32_t>(), n_seqs, 1600, n_head, n_kv, hd, bs, scale, ws.as<float>(), o1.as<float>(),
                         nullptr, whole);
    cu::attention_decode(dq.as<float>(), pk.as<float>(), pv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                         dlens.as<int32_t>(), n_seqs, 1600, n_head, n_kv, hd, bs, scale, ws.as<float>(), o2.as<float>(),
                         nullptr, pages);
    const auto a = test::from_device<float>(o1, q.size()), b = test::from_device<float>(o2, q.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
  // prefill: sequence 1's last 50 queries after 1450 (window from 1451 - 300), sequence 0 whole
  {
    const std::vector<int32_t> n_past = {0, 1450, 0}, q_start = {0, 700, 750, 787};
    auto [pk, pv, pmap] = paged({0, 1450 + 1 - window, 0});
    const auto q = test::random_floats(size_t(q_start.back()) * per, rng);
    auto dq = test::to_device(q), dqs = test::to_device(q_start), dnp = test::to_device(n_past);
    cu::device_buffer o1(q.size() * 4), o2(q.size() * 4);
    cu::attention_options whole{window, 0.0f, nullptr, {}}, pages{window, 0.0f, nullptr, {pmap.as<int32_t>(), n_layer, layer}};
    cu::attention_prefill(dq.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                          dqs.as<int32_t>(), dnp.as<int32_t>(), n_seqs, 700, n_head, n_kv, hd, bs, scale, o1.as<float>(),
                          nullptr, whole);
    cu::attention_prefill(dq.as<float>(), pk.as<float>(), pv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                          dqs.as<int32_t>(), dnp.as<int32_t>(), n_seqs, 700, n_head, n_kv, hd, bs, scale, o2.as<float>(),
                          nullptr, pages);
    const auto a = test::from_device<float>(o1, q.size()), b = test::from_device<float>(o2, q.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
  // the K/V write lands in the layer's page: rope_kv_write_table (NoPE: a plain write) vs its reference
  {
    auto [pk, pv, pmap] = paged({0, 0, 0});
    std::vector<int32_t> map(size_t(f.n_blocks) * n_layer);
    REQUIRE(pmap.download(map.data(), map.size() * 4));
    const int32_t n_tok = 5;
    const std::vector<int32_t> pos = {0, 17, 699, 1499, 36}, tok_seq = {0, 1, 0, 1, 2};
    auto q = test::random_floats(size_t(n_tok) * per, rng), k = test::random_floats(size_t(n_tok) * n_kv * hd, rng),
         v = test::random_floats(k.size(), rng);
    const size_t n_pool = size_t(f.n_blocks) * n_layer * bf;
    std::vector<float> rk(n_pool, NAN), rv(n_pool, NAN);
    {
      auto dpk = test::from_device<float>(pk, n_pool), dpv = test::from_device<float>(pv, n_pool);
      rk = dpk, rv = dpv;
    }
    auto dq = test::to_device(q), dkk = test::to_device(k), dvv = test::to_device(v), dpos = test::to_device(pos),
         dts = test::to_device(tok_seq);
    const cu::kv_page_map m{pmap.as<int32_t>(), n_layer, layer};
    cu::rope_kv_write_table(dq.as<float>(), dkk.as<float>(), dvv.as<float>(), dpos.as<int32_t>(), dts.as<int32_t>(),
                            dtab.as<int32_t>(), f.max_blocks, n_tok, n_head, n_kv, hd, 0, false, nullptr, 1.0f, bs,
                            pk.as<float>(), pv.as<float>(), nullptr, m);
    ref::rope_kv_write_table(q.data(), k.data(), v.data(), pos.data(), tok_seq.data(), f.block_tables.data(),
                             f.max_blocks, n_tok, n_head, n_kv, hd, 0, false, nullptr, 1.0f, bs, rk.data(), rv.data(),
                             cu::kv_page_map{map.data(), n_layer, layer});
    const auto gk = test::from_device<float>(pk, n_pool), gv = test::from_device<float>(pv, n_pool);
    // NaN pages compare by bits too
    CHECK(std::memcmp(gk.data(), rk.data(), n_pool * 4) == 0);
    CHECK(std::memcmp(gv.data(), rv.data(), n_pool * 4) == 0);
  }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("cuda windowed KV: the window's pages only, the full-KV backend's bits, the CPU's tokens") {
  const fs::path vocab = vocab_or_skip();
  const fs::path dir = temp_dir("backend");
  for (const char* arch : {"gemma3", "gpt-oss"}) {
    CAPTURE(std::string(arch));
    std::string err;
    std::shared_ptr<const gguf::file> f = gguf::file::open(write_model(arch, vocab, dir), &err);
    REQUIRE_MESSAGE(f, err);
    // Two sequences of 150 + 121 positions (18 blocks): windowed pools of 14 blocks' memory
    // (whole layers would hold 224 positions; gpt-oss keeps 2 of 4 layers whole, gemma3 1 of 6),
    // the full-KV pool with room for all.
    constexpr int32_t n_win_blocks = 14;
    side gw("cuda", f, true, n_win_blocks), gf("cuda", f, false, 24), cw("cpu", f, true, n_win_blocks);
    const kv_layout& wl = gw.pool->layout();
    REQUIRE(gw.pool->windowed());
    REQUIRE(wl.window == 8);
    REQUIRE(cw.pool->layout().layer_windowed == wl.layer_windowed);  // one layer description, both devices
    CHECK_FALSE(gf.pool->windowed());
    const int32_t n_vocab = gw.be->hparams().n_vocab;
    side* sides[3] = {&gw, &gf, &cw};
    int32_t seqs[3][2];
    for (int s = 0; s < 3; ++s)
      for (int q = 0; q < 2; ++q) seqs[s][q] = sides[s]->pool->create_seq();
    std::vector<float> logits[3];
    for (auto& l : logits) l.resize(size_t(64) * n_vocab);
    float worst = 0, worst_ref = 0;
    int32_t n_rows_checked = 0, n_via_ref = 0;
    // The CUDA ops' references, one per sequence (every layer whole: the windowed device equals that
    // bit for bit, checked below), fed the same tokens.
    const weight_store views;
    layer_stack desc;
    REQUIRE_MESSAGE(describe_model(*f, views, &desc, &err), err);
    test::cuda_ref::ref_forward refs[2] = {{desc, 12, k_block_size}, {desc, 12, k_block_size}};
    int32_t ref_past[2] = {0, 0};
    // One step on every side: the same tokens, each through its own pool's tables.
    auto step = [&](const std::vector<std::vector<token_id>>& toks, bool all_logits, const char* what) {
      REQUIRE_FALSE(all_logits);  // the references' rows: each sequence's last
      std::vector<float> lr;
      for (int q = 0; q < 2; ++q) {
        if (toks[size_t(q)].empty()) continue;
        const auto row = refs[q].forward(toks[size_t(q)], ref_past[q]);
        ref_past[q] += int32_t(toks[size_t(q)].size());
        lr.insert(lr.end(), row.begin(), row.end());
      }
      int32_t rows[3] = {0, 0, 0};
      for (int s = 0; s < 3; ++s) {
        block_pool& pool = *sides[s]->pool;
        std::vector<batch_seq> batch;
        for (int q = 0; q < 2; ++q) {
          if (toks[size_t(q)].empty()) continue;
          const int32_t n_past = pool.seq(seqs[s][q]).n_tokens;
          REQUIRE_MESSAGE(pool.reserve(seqs[s][q], n_past + int32_t(toks[size_t(q)].size())), what, " side ", s);
          batch.push_back(batch_seq{nullptr, n_past, toks[size_t(q)].data(), int32_t(toks[size_t(q)].size()), all_logits});
        }
        for (size_t i = 0, q = 0; q < 2; ++q)
          if (!toks[q].empty()) batch[i++].block_table = pool.seq(seqs[s][q]).blocks.data();
        rows[s] = sides[s]->be->forward(batch, logits[s].data());
        REQUIRE(rows[s] > 0);
        for (int q = 0; q < 2; ++q)
          if (!toks[size_t(q)].empty())
            pool.set_n_tokens(seqs[s][q], pool.seq(seqs[s][q]).n_tokens + int32_t(toks[size_t(q)].size()));
        pool.sanity();
      }
      REQUIRE(rows[0] == rows[1]);
      REQUIRE(rows[0] == rows[2]);
      const size_t n = size_t(rows[0]) * n_vocab;
      CHECK_MESSAGE(std::memcmp(logits[0].data(), logits[1].data(), n * 4) == 0, what,
                    ": windowed KV changed the CUDA logits");
      for (int32_t r = 0; r < rows[0]; ++r) {
        const float* g = logits[0].data() + size_t(r) * n_vocab;
        const float* c = logits[2].data() + size_t(r) * n_vocab;
        float d = 0;
        for (int32_t i = 0; i < n_vocab; ++i) d = std::max(d, std::fabs(g[i] - c[i]));
        worst = std::max(worst, d);
        ++n_rows_checked;
        const float* e = lr.data() + size_t(r) * n_vocab;
        float d_ref = 0;
        for (int32_t i = 0; i < n_vocab; ++i) d_ref = std::max(d_ref, std::fabs(g[i] - e[i]));
        worst_ref = std::max(worst_ref, d_ref);
        if (d > logit_tol(arch)) {
          // Further from the CPU: the device must give its references' logits (see k_ref_tol).
          ++n_via_ref;
          CHECK_MESSAGE(d_ref <= k_ref_tol, what, " row ", r, ": cuda vs cpu ", d, ", vs the references ", d_ref);
          if (top_gap(e, n_vocab) >= std::max(k_near_tie, 2 * k_ref_tol))
            CHECK_MESSAGE(argmax(g, n_vocab) == argmax(e, n_vocab), what, " row ", r);
          continue;
        }
        // NOTE: logits within tol of each other can swap a top-2 gap below 2 tol (gpt-oss: 0.03 apart
        // by the MXFP4 activations' rounding; unit.cuda_reference_forward sees 2 such steps in 60).
        if (top_gap(c, n_vocab) >= std::max(k_near_tie, 2 * logit_tol(arch)))
          CHECK_MESSAGE(argmax(g, n_vocab) == argmax(c, n_vocab), what, " row ", r);
      }
    };
    // Prefill: a (90 tokens) in chunks of 23 beside b (61) in chunks of 31, then greedy decode of
    // both from the CPU's tokens (the same inputs on every side).
    const auto a = prompt(90, 1), b = prompt(61, 2);
    for (int32_t i = 0; i < 4; ++i) {
      std::vector<token_id> ca(a.begin() + std::min<ptrdiff_t>(90, 23 * i), a.begin() + std::min<ptrdiff_t>(90, 23 * (i + 1)));
      std::vector<token_id> cb(b.begin() + std::min<ptrdiff_t>(61, 31 * i), b.begin() + std::min<ptrdiff_t>(61, 31 * (i + 1)));
      step({ca, cb}, false, "prefill");
    }
    // the last step's rows: a's, then b's (b ended after 2 chunks: its last logits came earlier)
    token_id na = argmax(logits[2].data(), n_vocab), nb = 13;
    for (int32_t t = 0; t < 60; ++t) {
      step({{na}, {nb}}, false, "decode");
      na = argmax(logits[2].data(), n_vocab);
      nb = argmax(logits[2].data() + n_vocab, n_vocab);
    }
    // The device holds what the layout counts: full layers whole, windowed layers the window.
    const int32_t la = gw.pool->seq(seqs[0][0]).n_tokens, lb = gw.pool->seq(seqs[0][1]).n_tokens;
    CHECK(la == 150);
    CHECK(lb == 121);
    CHECK(gw.pool->n_pages_used() * 2 * wl.block_elem_bytes() == wl.seq_bytes(la) + wl.seq_bytes(lb));
    CHECK(gw.pool->n_pages_used() == cw.pool->n_pages_used());
    CHECK(gw.pool->blocks_for_tokens(la) + gw.pool->blocks_for_tokens(lb) > n_win_blocks);  // more than whole layers fit
    MESSAGE(arch, ": ", n_rows_checked, " rows; windowed = full-KV CUDA logits bitwise; vs CPU largest difference ",
            worst, " (", n_via_ref, " rows past the tolerance checked against the references); vs the references ",
            worst_ref, "; device pages held ", gw.pool->n_pages_used(), " of ", n_win_blocks * wl.n_layer);
    CHECK(n_via_ref <= (std::string(arch) == "gpt-oss" ? n_rows_checked / 4 : 0));
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
  fs::remove_all(dir);
}

TEST_CASE("cuda windowed KV engine: outputs equal full KV, batched; spill and restore of the short file") {
  const fs::path vocab = vocab_or_skip();
  for (const char* arch : {"gemma3", "gpt-oss"}) {
    CAPTURE(std::string(arch));
    const fs::path dir = temp_dir(arch);
    const std::string model = write_model(arch, vocab, dir);
    auto config = [&](bool windowed) {
      engine_config c;
      c.model_path = model;
      c.device = "cuda";
      c.n_threads = 2;
      c.block_size = 16;
      c.kv_budget_bytes = 8ull << 20;
      c.windowed_kv = windowed;
      return c;
    };
    auto full = test::load_as<engine_impl>(config(false));
    auto cfg = config(true);
    cfg.spill_dir = (dir / "kv").string();
    auto e = test::load_as<engine_impl>(cfg);
    REQUIRE(e->pool().windowed());
    CHECK_FALSE(full->pool().windowed());
    const kv_layout& wl = e->pool().layout();

    std::vector<token_request> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(test::greedy(prompt(90 + 13 * i, i), 24));
    const auto res = test::run_all(*e, reqs);
    for (int i = 0; i < 4; ++i)
      CHECK_MESSAGE(res[size_t(i)].output_ids == test::run_one(*full, test::greedy(reqs[size_t(i)].prompt, 24)).output_ids,
                    "request ", i);
    e->sanity();

    std::vector<kv_move_event> moves;
    e->on_kv_move([&](const kv_move_event& m) { moves.push_back(m); });
    const auto p1 = prompt(120, 9);
    const auto t1 = test::run_one(*e, test::greedy(p1, 20, 7));
    e->park(7, 3600.0);
    e->step();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].what == kv_move_event::kind::spill);
    CHECK(moves[0].n_bytes == wl.seq_bytes(moves[0].n_tokens));
    auto p2 = p1;
    p2.insert(p2.end(), t1.output_ids.begin(), t1.output_ids.end());
    p2.insert(p2.end(), {13, 350, 351, 352});
    const auto t2 = test::run_one(*e, test::greedy(p2, 20, 7));
    CHECK(e->stats().n_restores == 1);
    CHECK(t2.usage.n_tokens_computed <= 5);
    CHECK(t2.output_ids == test::run_one(*full, test::greedy(p2, 20)).output_ids);
    e->sanity();
    CHECK(e->healthy());
    fs::remove_all(dir);
  }
  CHECK_FALSE(kernels::cuda::cuda_failed());
}

#else

TEST_CASE("cuda windowed KV: skipped") { test::skip("built without CUDA"); }

#endif
