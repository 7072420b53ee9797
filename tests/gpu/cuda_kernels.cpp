// Every CUDA op against its plain C++ reference (kernels/cuda/*.cpp) over a few
// shapes and weight types. Tolerances (error relative to the largest reference
// magnitude): f32 ops 1e-5, quantised matvec vs dequantised reference 1e-3,
// attention 2e-3. Exits 77 (skipped) without a device or without CUDA.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "cuda_device_test.h"
#include "cuda_test_data.h"

#if AGENTQ_HAVE_CUDA

using namespace agentq;
namespace cu = agentq::kernels::cuda;
namespace ref = agentq::kernels::ref;
using cu::weight_type;
using test::from_device;
using test::rel_err;
using test::require_device;
using test::to_device;

namespace {

const weight_type all_types[] = {weight_type::f32,  weight_type::f16,  weight_type::bf16,   weight_type::q8_0,
                                 weight_type::q4_k, weight_type::q6_k, weight_type::q4_0,   weight_type::q4_1,
                                 weight_type::q5_0, weight_type::q5_1, weight_type::q2_k,   weight_type::q3_k,
                                 weight_type::q5_k, weight_type::iq4_nl, weight_type::iq4_xs, weight_type::mxfp4};

}  // namespace

TEST_CASE("embedding gather dequantises every weight type") {
  require_device();
  std::mt19937 rng(10);
  for (weight_type t : all_types) {
    const int32_t n_vocab = 50, n_embd = 512;
    const auto table = test::random_weights(t, n_vocab, n_embd, rng);
    const std::vector<int32_t> ids = {3, 49, 0, 3, 17, 22, 8};
    std::vector<float> expect(ids.size() * n_embd);
    ref::embedding(t, table.data(), ids.data(), int32_t(ids.size()), n_embd, expect.data());
    auto d_table = to_device(table);
    auto d_ids = to_device(ids);
    cu::device_buffer d_out(expect.size() * 4);
    cu::embedding(t, d_table.data(), d_ids.as<int32_t>(), int32_t(ids.size()), n_embd, d_out.as<float>(), nullptr);
    CHECK_MESSAGE(rel_err(from_device<float>(d_out, expect.size()), expect) < 1e-5, "type ", int(t));
  }
}

TEST_CASE("rms_norm, swiglu, rope (normal, neox, freq factors), add/add_rows/gather_rows, token mask") {
  require_device();
  std::mt19937 rng(11);
  for (int32_t n : {64, 4096, 5000}) {
    const int32_t rows = 3;
    const auto x = test::random_floats(size_t(rows) * n, rng), w = test::random_floats(size_t(n), rng);
    std::vector<float> expect(x.size());
    ref::rms_norm(x.data(), w.data(), expect.data(), rows, n, 1e-5f);
    auto dx = to_device(x), dw = to_device(w);
    cu::rms_norm(dx.as<float>(), dw.as<float>(), dx.as<float>(), rows, n, 1e-5f, nullptr);  // in place
    CHECK_MESSAGE(rel_err(from_device<float>(dx, x.size()), expect) < 1e-5, "n ", n);
  }
  {
    const int64_t n = 100003;
    const auto g = test::random_floats(size_t(n), rng, -8.0f, 8.0f), u = test::random_floats(size_t(n), rng);
    std::vector<float> expect(static_cast<size_t>(n));
    ref::swiglu(g.data(), u.data(), expect.data(), n);
    auto dg = to_device(g), du = to_device(u);
    cu::device_buffer dout(size_t(n) * 4);
    cu::swiglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, nullptr);
    CHECK(rel_err(from_device<float>(dout, size_t(n)), expect) < 1e-5);
  }
  for (bool neox : {false, true}) {
    for (int32_t n_rot : {128, 64}) {
      const int32_t n_tokens = 5, n_head = 4, head_dim = 128;
      const std::vector<int32_t> pos = {0, 1, 17, 4000, 131000};
      auto x = test::random_floats(size_t(n_tokens * n_head * head_dim), rng);
      const auto ff = test::random_floats(size_t(n_rot / 2), rng, 1.0f, 8.0f);  // Llama 3.1-style rope_freqs
      const bool use_ff = n_rot == 64;
      auto dx = to_device(x);
      auto dpos = to_device(pos);
      auto dff = to_device(ff);
      ref::rope(x.data(), pos.data(), n_tokens, n_head, head_dim, n_rot, 500000.0f, 0.5f, neox,
                use_ff ? ff.data() : nullptr);
      cu::rope(dx.as<float>(), dpos.as<int32_t>(), n_tokens, n_head, head_dim, n_rot, 500000.0f, 0.5f, neox,
               use_ff ? dff.as<float>() : nullptr, nullptr);
      CHECK_MESSAGE(rel_err(from_device<float>(dx, x.size()), x) < 1e-5, "neox ", neox, " n_rot ", n_rot);
    }
  }
  {
    const int32_t rows = 5, n = 300;
    auto x = test::random_floats(size_t(rows * n), rng);
    const auto y = test::random_floats(x.size(), rng), b = test::random_floats(size_t(n), rng);
    const std::vector<int32_t> pick = {4, 0, 4};
    auto dx = to_device(x), dy = to_device(y), db = to_device(b), dpick = to_device(pick);
    cu::device_buffer dg(pick.size() * size_t(n) * 4);
    ref::add(x.data(), y.data(), int64_t(x.size()));
    ref::add_rows(x.data(), b.data(), rows, n);
    std::vector<float> g(pick.size() * size_t(n));
    ref::gather_rows(x.data(), pick.data(), int32_t(pick.size()), n, g.data());
    cu::add(dx.as<float>(), dy.as<float>(), int64_t(x.size()), nullptr);
    cu::add_rows(dx.as<float>(), db.as<float>(), rows, n, nullptr);
    cu::gather_rows(dx.as<float>(), dpick.as<int32_t>(), int32_t(pick.size()), n, dg.as<float>(), nullptr);
    CHECK(from_device<float>(dx, x.size()) == x);
    CHECK(from_device<float>(dg, g.size()) == g);
  }
  {
    const int32_t rows = 2, n_vocab = 1000, words = (n_vocab + 31) / 32;
    auto l = test::random_floats(size_t(rows * n_vocab), rng);
    std::vector<uint32_t> mask(size_t(rows * words));
    for (auto& m : mask) m = uint32_t(rng());
    auto dl = to_device(l);
    auto dm = to_device(mask);
    ref::apply_token_mask(l.data(), mask.data(), rows, n_vocab);
    cu::apply_token_mask(dl.as<float>(), dm.as<uint32_t>(), rows, n_vocab, nullptr);
    const auto got = from_device<float>(dl, l.size());
    CHECK(std::memcmp(got.data(), l.data(), l.size() * 4) == 0);
  }
}

TEST_CASE("matvec: every type, several shapes and batch sizes; batch-invariant") {
  require_device();
  std::mt19937 rng(12);
  struct shape { int64_t n_out, n_in; };
  for (weight_type t : all_types) {
    for (shape sh : {shape{64, 256}, shape{301, 1024}, shape{1000, 4096}}) {
      const auto w = test::random_weights(t, sh.n_out, sh.n_in, rng);
      auto dw = to_device(w);
      for (int32_t n_x : {1, 5, 11}) {
        const auto x = test::random_floats(size_t(n_x * sh.n_in), rng);
        std::vector<float> expect(size_t(n_x * sh.n_out));
        ref::matvec(t, w.data(), sh.n_out, sh.n_in, x.data(), n_x, expect.data());
        auto dx = to_device(x);
        cu::device_buffer dy(expect.size() * 4);
        cu::matvec(t, dw.data(), sh.n_out, sh.n_in, dx.as<float>(), n_x, dy.as<float>(), nullptr);
        const auto got = from_device<float>(dy, expect.size());
        const double tol = t == weight_type::f32 ? 1e-5 : 1e-3;
        CHECK_MESSAGE(rel_err(got, expect) < tol, "type ", int(t), " ", sh.n_out, "x", sh.n_in, " n_x ", n_x);
        if (n_x > 1) {  // the first vector alone gives bitwise the same row
          cu::device_buffer dy1(size_t(sh.n_out) * 4);
          cu::matvec(t, dw.data(), sh.n_out, sh.n_in, dx.as<float>(), 1, dy1.as<float>(), nullptr);
          const auto one = from_device<float>(dy1, size_t(sh.n_out));
          CHECK_MESSAGE(std::memcmp(one.data(), got.data(), one.size() * 4) == 0, "batch invariance, type ", int(t));
        }
      }
    }
  }
}

TEST_CASE("fused matvecs (Q/K/V segments, residual accumulate, gate/up SwiGLU) equal matvec + the separate op, bitwise") {
  require_device();
  std::mt19937 rng(15);
  for (weight_type t : all_types) {
    const int64_t n_in = 512, n_q = 96, n_kv = 35;
    for (int32_t n_x : {1, 3, 9}) {
      const auto wq = test::random_weights(t, n_q, n_in, rng), wk = test::random_weights(t, n_kv, n_in, rng),
                 wv = test::random_weights(t, n_kv, n_in, rng);
      const auto x = test::random_floats(size_t(n_x * n_in), rng);
      auto dq = to_device(wq), dk = to_device(wk), dv = to_device(wv), dx = to_device(x);
      // Separate launches.
      cu::device_buffer yq(size_t(n_x * n_q) * 4), yk(size_t(n_x * n_kv) * 4), yv(size_t(n_x * n_kv) * 4);
      cu::matvec(t, dq.data(), n_q, n_in, dx.as<float>(), n_x, yq.as<float>(), nullptr);
      cu::matvec(t, dk.data(), n_kv, n_in, dx.as<float>(), n_x, yk.as<float>(), nullptr);
      cu::matvec(t, dv.data(), n_kv, n_in, dx.as<float>(), n_x, yv.as<float>(), nullptr);
      // One launch over three segments.
      cu::device_buffer fq(size_t(n_x * n_q) * 4), fk(size_t(n_x * n_kv) * 4), fv(size_t(n_x * n_kv) * 4);
      const cu::matvec_segment segs[3] = {{dq.data(), fq.as<float>(), n_q}, {dk.data(), fk.as<float>(), n_kv},
                                          {dv.data(), fv.as<float>(), n_kv}};
      cu::matvec_multi(t, segs, 3, n_in, dx.as<float>(), n_x, false, nullptr);
      for (auto [a, b, n] : {std::tuple{&yq, &fq, n_q}, std::tuple{&yk, &fk, n_kv}, std::tuple{&yv, &fv, n_kv}}) {
        const auto sep = from_device<float>(*a, size_t(n_x * n));
        const auto fused = from_device<float>(*b, size_t(n_x * n));
        CHECK_MESSAGE(std::memcmp(sep.data(), fused.data(), sep.size() * 4) == 0, "segments, type ", int(t), " n_x ", n_x);
      }
      // Residual: y += W x equals add(y, W x).
      const auto base = test::random_floats(size_t(n_x * n_q), rng);
      auto acc = to_device(base), sum = to_device(base);
      const cu::matvec_segment one{dq.data(), acc.as<float>(), n_q};
      cu::matvec_multi(t, &one, 1, n_in, dx.as<float>(), n_x, true, nullptr);
      cu::add(sum.as<float>(), yq.as<float>(), n_x * n_q, nullptr);
      const auto got_acc = from_device<float>(acc, base.size()), got_sum = from_device<float>(sum, base.size());
      CHECK_MESSAGE(std::memcmp(got_acc.data(), got_sum.data(), base.size() * 4) == 0, "accumulate, type ", int(t));
      // SwiGLU: silu(gate x) * (up x), gate = wq, up = a second matrix of the same shape.
      const auto wu = test::random_weights(t, n_q, n_in, rng);
      auto du = to_device(wu);
      cu::device_buffer yu(size_t(n_x * n_q) * 4), sw(size_t(n_x * n_q) * 4), fsw(size_t(n_x * n_q) * 4);
      cu::matvec(t, du.data(), n_q, n_in, dx.as<float>(), n_x, yu.as<float>(), nullptr);
      cu::swiglu(yq.as<float>(), yu.as<float>(), sw.as<float>(), n_x * n_q, nullptr);
      cu::matvec_swiglu(t, dq.data(), du.data(), n_q, n_in, dx.as<float>(), n_x, fsw.as<float>(), nullptr);
      const auto a = from_device<float>(sw, size_t(n_x * n_q)), b = from_device<float>(fsw, size_t(n_x * n_q));
      CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0, "swiglu, type ", int(t), " n_x ", n_x);
    }
  }
}

TEST_CASE("gemm via cuBLAS matches the reference matvec") {
  require_device();
  std::mt19937 rng(13);
  void* blas = cu::cublas_create(nullptr);
  REQUIRE(blas);
  for (weight_type t : all_types) {
    const int64_t n_out = 300, n_in = 512;
    const int32_t n_x = 17;
    const auto w = test::random_weights(t, n_out, n_in, rng);
    const auto x = test::random_floats(size_t(n_x * n_in), rng);
    std::vector<float> expect(size_t(n_x * n_out));
    ref::matvec(t, w.data(), n_out, n_in, x.data(), n_x, expect.data());
    auto dw = to_device(w), dx = to_device(x);
    cu::device_buffer dy(expect.size() * 4), scratch(cu::gemm_scratch_bytes(t, n_out, n_in, n_x) + 256);
    REQUIRE(cu::gemm(blas, t, dw.data(), n_out, n_in, dx.as<float>(), n_x, dy.as<float>(), scratch.data(), nullptr));
    // Activations (and quantised weights) go through 16-bit floats: bf16 keeps 8 bits of mantissa.
    const double tol = t == weight_type::f32 ? 1e-4 : t == weight_type::bf16 ? 2e-2 : 5e-3;
    CHECK_MESSAGE(rel_err(from_device<float>(dy, expect.size()), expect) < tol, "type ", int(t));
  }
  cu::cublas_destroy(blas);
}

TEST_CASE("paged attention: kv_write, split-K decode (batch-invariant), causal prefill") {
  require_device();
  std::mt19937 rng(14);
  for (int32_t head_dim : {8, 64, 128, 256}) {  // 8: the tiny test model's head size
    const std::vector<int32_t> lens = {1, 700, 1500, 37};
    const int32_t n_seqs = int32_t(lens.size()), n_head = 8, n_head_kv = 2, block_size = 16;
    test::paged_fixture f(lens, n_head_kv, head_dim, block_size, rng);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const int32_t max_len = 1500;

    // kv_write: overwrite each sequence's last position through the tables.
    const int32_t row = n_head_kv * head_dim;
    std::vector<int32_t> pos, tok_seq;
    for (int32_t s = 0; s < n_seqs; ++s) pos.push_back(lens[size_t(s)] - 1), tok_seq.push_back(s);
    const auto k_new = test::random_floats(size_t(n_seqs * row), rng), v_new = test::random_floats(size_t(n_seqs * row), rng);
    auto dk = to_device(f.k), dv = to_device(f.v), dtab = to_device(f.block_tables);
    auto dkn = to_device(k_new), dvn = to_device(v_new), dpos = to_device(pos), dts = to_device(tok_seq);
    ref::kv_write(k_new.data(), v_new.data(), pos.data(), tok_seq.data(), f.block_tables.data(), f.max_blocks, n_seqs,
                  row, block_size, f.k.data(), f.v.data());
    cu::kv_write(dkn.as<float>(), dvn.as<float>(), dpos.as<int32_t>(), dts.as<int32_t>(), dtab.as<int32_t>(),
                 f.max_blocks, n_seqs, row, block_size, dk.as<float>(), dv.as<float>(), nullptr);
    CHECK(from_device<float>(dk, f.k.size()) == f.k);
    CHECK(from_device<float>(dv, f.v.size()) == f.v);

    // rope_kv_write = rope(q), rope(k), kv_write, bitwise (partial rotation: n_rot < head_dim).
    for (bool neox : {false, true}) {
      const int32_t n_rot = head_dim >= 64 ? head_dim / 2 : head_dim;
      const auto q0 = test::random_floats(size_t(n_seqs * n_head * head_dim), rng);
      auto qa = to_device(q0), qb = to_device(q0), ka = to_device(k_new), kb = to_device(k_new);
      auto ca_k = to_device(f.k), ca_v = to_device(f.v), cb_k = to_device(f.k), cb_v = to_device(f.v);
      cu::rope(qa.as<float>(), dpos.as<int32_t>(), n_seqs, n_head, head_dim, n_rot, 10000.0f, 1.0f, neox, nullptr,
               nullptr);
      cu::rope(ka.as<float>(), dpos.as<int32_t>(), n_seqs, n_head_kv, head_dim, n_rot, 10000.0f, 1.0f, neox, nullptr,
               nullptr);
      cu::kv_write(ka.as<float>(), dvn.as<float>(), dpos.as<int32_t>(), dts.as<int32_t>(), dtab.as<int32_t>(),
                   f.max_blocks, n_seqs, row, block_size, ca_k.as<float>(), ca_v.as<float>(), nullptr);
      cu::rope_kv_write(qb.as<float>(), kb.as<float>(), dvn.as<float>(), dpos.as<int32_t>(), dts.as<int32_t>(),
                        dtab.as<int32_t>(), f.max_blocks, n_seqs, n_head, n_head_kv, head_dim, n_rot, 10000.0f, 1.0f,
                        neox, nullptr, block_size, cb_k.as<float>(), cb_v.as<float>(), nullptr);
      auto same = [&](const cu::device_buffer& a, const cu::device_buffer& b, size_t n) {
        const auto x = from_device<float>(a, n), y = from_device<float>(b, n);
        return std::memcmp(x.data(), y.data(), n * 4) == 0;
      };
      CHECK_MESSAGE(same(qa, qb, q0.size()), "rope_kv_write q, head_dim ", head_dim, " neox ", neox);
      CHECK_MESSAGE(same(ca_k, cb_k, f.k.size()), "rope_kv_write k cache, head_dim ", head_dim, " neox ", neox);
      CHECK_MESSAGE(same(ca_v, cb_v, f.v.size()), "rope_kv_write v cache, head_dim ", head_dim);
    }

    const auto q = test::random_floats(size_t(n_seqs * n_head * head_dim), rng);
    std::vector<float> expect(q.size());
    ref::attention_decode(q.data(), f.k.data(), f.v.data(), f.block_tables.data(), f.max_blocks, lens.data(), n_seqs,
                          n_head, n_head_kv, head_dim, block_size, scale, expect.data());
    auto dq = to_device(q), dlens = to_device(lens);
    cu::device_buffer ws(cu::attention_decode_workspace_floats(n_seqs, n_head, head_dim, max_len) * 4);
    cu::device_buffer dout(q.size() * 4);
    cu::attention_decode(dq.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                         dlens.as<int32_t>(), n_seqs, max_len, n_head, n_head_kv, head_dim, block_size, scale,
                         ws.as<float>(), dout.as<float>(), nullptr);
    const auto got = from_device<float>(dout, q.size());
    CHECK_MESSAGE(rel_err(got, expect) < 2e-3, "decode head_dim ", head_dim);

    // Sequence 2 alone (its own table row, a smaller grid) gives bitwise the same output.
    const size_t per = size_t(n_head * head_dim);
    cu::device_buffer dout1(per * 4);
    cu::attention_decode(dq.as<float>() + 2 * per, dk.as<float>(), dv.as<float>(), dtab.as<int32_t>() + 2 * f.max_blocks,
                         f.max_blocks, dlens.as<int32_t>() + 2, 1, lens[2], n_head, n_head_kv, head_dim, block_size,
                         scale, ws.as<float>(), dout1.as<float>(), nullptr);
    const auto one = from_device<float>(dout1, per);
    CHECK(std::memcmp(one.data(), got.data() + 2 * per, per * 4) == 0);
    // Sequences 0 and 3 alone fit one partition: the kernel normalises in place (no reduce
    // launch) and must still give the batched, reduced bits.
    for (int32_t si : {0, 3}) {
      cu::attention_decode(dq.as<float>() + si * per, dk.as<float>(), dv.as<float>(),
                           dtab.as<int32_t>() + si * f.max_blocks, f.max_blocks, dlens.as<int32_t>() + si, 1,
                           lens[size_t(si)], n_head, n_head_kv, head_dim, block_size, scale, ws.as<float>(),
                           dout1.as<float>(), nullptr);
      const auto solo = from_device<float>(dout1, per);
      CHECK_MESSAGE(std::memcmp(solo.data(), got.data() + si * per, per * 4) == 0, "one partition, seq ", si,
                    " head_dim ", head_dim);
    }

    // Prefill: seq 1 continues after 650 cached tokens with 50 new ones, seq 2 is a fresh 1500-token prompt,
    // seq 3 has 37 tokens and nothing cached.
    const std::vector<int32_t> n_past = {0, 650, 0, 0};
    const std::vector<int32_t> q_start = {0, 1, 51, 1551, 1588};
    const int32_t n_rows = q_start.back();
    const auto qp = test::random_floats(size_t(n_rows) * per, rng);
    std::vector<float> expp(qp.size());
    ref::attention_prefill(qp.data(), f.k.data(), f.v.data(), f.block_tables.data(), f.max_blocks, q_start.data(),
                           n_past.data(), n_seqs, n_head, n_head_kv, head_dim, block_size, scale, expp.data());
    auto dqp = to_device(qp), dqs = to_device(q_start), dnp = to_device(n_past);
    cu::device_buffer doutp(qp.size() * 4);
    cu::attention_prefill(dqp.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                          dqs.as<int32_t>(), dnp.as<int32_t>(), n_seqs, 1500, n_head, n_head_kv, head_dim, block_size,
                          scale, doutp.as<float>(), nullptr);
    CHECK_MESSAGE(rel_err(from_device<float>(doutp, qp.size()), expp) < 2e-3, "prefill head_dim ", head_dim);
  }
}

TEST_CASE("argmax and seeded sampling agree with the reference rule") {
  require_device();
  std::mt19937 rng(15);
  const int32_t n_rows = 64, n_vocab = 32000;
  auto l = test::random_floats(size_t(n_rows) * n_vocab, rng, -10.0f, 10.0f);
  l[5 * size_t(n_vocab) + 7] = 50.0f;  // ties: lowest index wins
  l[5 * size_t(n_vocab) + 9000] = 50.0f;
  std::vector<cu::sample_params> params(static_cast<size_t>(n_rows));
  for (int32_t r = 0; r < n_rows; ++r) {
    auto& p = params[size_t(r)];
    p.seed = 1234 + uint64_t(r);
    p.counter = uint64_t(r) * 7;
    p.temperature = r % 8 == 0 ? 0.0f : 0.5f + 0.1f * float(r % 5);
    p.top_k = r % 3 == 0 ? 0 : (r % 3 == 1 ? 40 : 1000);
    p.top_p = r % 4 == 0 ? 1.0f : 0.9f;
  }
  auto dl = to_device(l), dp = to_device(params);
  cu::device_buffer dout(size_t(n_rows) * 4), dmax(size_t(n_rows) * 4);
  cu::argmax(dl.as<float>(), n_rows, n_vocab, dmax.as<int32_t>(), nullptr);
  cu::sample(dl.as<float>(), n_rows, n_vocab, dp.as<cu::sample_params>(), dout.as<int32_t>(), nullptr);
  const auto amax = from_device<int32_t>(dmax, size_t(n_rows));
  const auto got = from_device<int32_t>(dout, size_t(n_rows));
  int mismatches = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    CHECK(amax[size_t(r)] == ref::argmax_row(l.data() + size_t(r) * n_vocab, n_vocab));
    mismatches += got[size_t(r)] != ref::sample_row(l.data() + size_t(r) * n_vocab, n_vocab, params[size_t(r)]);
  }
  CHECK(amax[5] == 7);
  // NOTE: exp() may differ by an ulp between host and device; a draw landing within
  // that of a boundary may pick a neighbour. More than one such row means a bug.
  CHECK(mismatches <= 1);
  // Same seeds, same draws.
  cu::device_buffer dout2(size_t(n_rows) * 4);
  cu::sample(dl.as<float>(), n_rows, n_vocab, dp.as<cu::sample_params>(), dout2.as<int32_t>(), nullptr);
  CHECK(from_device<int32_t>(dout2, size_t(n_rows)) == got);
}

TEST_CASE("graph capture replays a decode-like sequence; KV blocks spill and restore") {
  require_device();
  std::mt19937 rng(16);
  const int32_t n = 4096;
  const auto x = test::random_floats(size_t(n), rng), w = test::random_floats(size_t(n), rng);
  auto dx = to_device(x), dw = to_device(w);
  cu::device_buffer dy(size_t(n) * 4), dz(size_t(n) * 4);
  cu::stream_t s = cu::stream_create();
  REQUIRE(s);
  cu::graph g;
  REQUIRE(g.begin_capture(s));
  cu::rms_norm(dx.as<float>(), dw.as<float>(), dy.as<float>(), 1, n, 1e-5f, s);
  cu::swiglu(dy.as<float>(), dx.as<float>(), dz.as<float>(), n, s);
  REQUIRE(g.end_capture());
  REQUIRE(g.ready());
  std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
  ref::rms_norm(x.data(), w.data(), y.data(), 1, n, 1e-5f);
  ref::swiglu(y.data(), x.data(), z.data(), n);
  for (int rep = 0; rep < 3; ++rep) {
    REQUIRE(dz.zero());
    REQUIRE(g.replay(s));
    REQUIRE(cu::stream_synchronize(s));
    CHECK(rel_err(from_device<float>(dz, size_t(n)), z) < 1e-5);
  }
  // Re-capture with the same topology updates in place.
  REQUIRE(g.begin_capture(s));
  cu::rms_norm(dx.as<float>(), dw.as<float>(), dy.as<float>(), 1, n, 1e-5f, s);
  cu::swiglu(dy.as<float>(), dx.as<float>(), dz.as<float>(), n, s);
  REQUIRE(g.end_capture());
  REQUIRE(g.replay(s));
  REQUIRE(cu::stream_synchronize(s));
  cu::stream_destroy(s);

  // Spill blocks 3 and 1 of a 2-layer cache to host slots 0 and 1, wipe, restore into blocks 0 and 2.
  const int32_t n_layer = 2, n_blocks = 4;
  const int64_t bf = 16 * 64;
  cu::kv_device_cache kv = cu::kv_device_alloc(n_layer, n_blocks, bf);
  REQUIRE(kv.k.ok());
  REQUIRE(kv.v.ok());
  const auto kh = test::random_floats(size_t(n_layer * n_blocks * bf), rng);
  const auto vh = test::random_floats(kh.size(), rng);
  REQUIRE(kv.k.upload(kh.data(), kh.size() * 4));
  REQUIRE(kv.v.upload(vh.data(), vh.size() * 4));
  cu::pinned_buffer host(size_t(2 * n_layer * 2 * bf) * 4);
  REQUIRE(host.ok());
  const int32_t src[] = {3, 1}, slots[] = {0, 1}, dst[] = {0, 2};
  REQUIRE(cu::kv_spill_blocks(kv, src, slots, 2, host.as<float>()));
  void* done = cu::event_create();
  REQUIRE(cu::event_record(done, cu::kv_copy_stream()));
  REQUIRE(cu::event_synchronize(done));
  REQUIRE(kv.k.zero());
  REQUIRE(kv.v.zero());
  REQUIRE(cu::kv_restore_blocks(kv, slots, dst, 2, host.as<float>()));
  REQUIRE(cu::event_record(done, cu::kv_copy_stream()));
  REQUIRE(cu::event_synchronize(done));
  cu::event_destroy(done);
  const auto k_after = from_device<float>(kv.k, kh.size());
  const auto v_after = from_device<float>(kv.v, vh.size());
  for (int32_t layer = 0; layer < n_layer; ++layer)
    for (int i = 0; i < 2; ++i) {
      const size_t a = size_t((layer * n_blocks + dst[i]) * bf), b = size_t((layer * n_blocks + src[i]) * bf);
      CHECK(std::memcmp(k_after.data() + a, kh.data() + b, size_t(bf) * 4) == 0);
      CHECK(std::memcmp(v_after.data() + a, vh.data() + b, size_t(bf) * 4) == 0);
    }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("family ops: gelu_mul (F16-rounded GELU-tanh), scale, softcap, moe_topk (both gatings)") {
  require_device();
  std::mt19937 rng(25);
  const int64_t n = 70001;
  const auto g = test::random_floats(size_t(n), rng, -12.0f, 12.0f), u = test::random_floats(size_t(n), rng);
  {
    std::vector<float> expect(static_cast<size_t>(n));
    ref::gelu_mul(g.data(), u.data(), expect.data(), n);
    auto dg = to_device(g), du = to_device(u);
    cu::gelu_mul(dg.as<float>(), du.as<float>(), dg.as<float>(), n, nullptr);  // in place
    // NOTE: tanhf and std::tanh may differ by an ulp, which can move the F16 rounding by one step
    CHECK(rel_err(from_device<float>(dg, size_t(n)), expect) < 1e-3);
  }
  {
    auto expect = g;
    ref::scale(expect.data(), 16.0f, n);
    auto dx = to_device(g);
    cu::scale(dx.as<float>(), 16.0f, n, nullptr);
    CHECK(rel_err(from_device<float>(dx, size_t(n)), expect) == 0);
    auto capped = g;
    ref::softcap(capped.data(), 30.0f, n);
    auto dc = to_device(g);
    cu::softcap(dc.as<float>(), 30.0f, n, nullptr);
    CHECK(rel_err(from_device<float>(dc, size_t(n)), capped) < 1e-5);
  }
  for (auto gating : {cu::moe_gating::softmax_norm, cu::moe_gating::topk_softmax}) {
    for (auto [n_expert, k] : {std::pair{128, 8}, std::pair{32, 4}, std::pair{8, 8}}) {
      const int32_t n_rows = 37;
      const auto logits = test::random_floats(size_t(n_rows) * size_t(n_expert), rng, -4.0f, 4.0f);
      std::vector<int32_t> ids(size_t(n_rows) * size_t(k));
      std::vector<float> w(ids.size());
      ref::moe_topk(logits.data(), n_rows, n_expert, k, gating, ids.data(), w.data());
      auto dl = to_device(logits);
      cu::device_buffer did(ids.size() * 4 + 16), dw(w.size() * 4 + 16);
      cu::moe_topk(dl.as<float>(), n_rows, n_expert, k, gating, did.as<int32_t>(), dw.as<float>(), nullptr);
      CHECK_MESSAGE(from_device<int32_t>(did, ids.size()) == ids, "gating ", int(gating), " experts ", n_expert);
      CHECK_MESSAGE(rel_err(from_device<float>(dw, w.size()), w) < 1e-5, "gating ", int(gating), " experts ", n_expert);
    }
  }
  CHECK_FALSE(cu::cuda_failed());
}

#else  // built without the CUDA backend

TEST_CASE("cuda kernels: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
