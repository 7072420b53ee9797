// The CUDA ops the families beyond llama add to the forward pass, against their references
// (kernels/cuda/*.cpp): attention with a sliding window, soft-capping and sinks (decode over
// several partitions and one, prefill), RoPE from a table of angles (plain, NoPE), the MoE rows
// (moe_matvec: every weight type; bitwise matvec on the chosen expert; grouped by expert with
// moe_group: bitwise moe_matvec), per-expert biases, the clamped SwiGLU and the experts' weighted
// sum. Exits 77 (skipped) without a device or CUDA.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
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

TEST_CASE("attention with a window, soft-capping and sinks: decode (split and one partition) and prefill") {
  require_device();
  std::mt19937 rng(26);
  for (int32_t head_dim : {64, 256}) {
    const std::vector<int32_t> lens = {1, 700, 1500, 37};
    const int32_t n_seqs = int32_t(lens.size()), n_head = 8, n_head_kv = 2, block_size = 16, max_len = 1500;
    test::paged_fixture f(lens, n_head_kv, head_dim, block_size, rng);
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const auto sinks = test::random_floats(size_t(n_head), rng, -2.0f, 2.0f);
    auto dk = to_device(f.k), dv = to_device(f.v), dtab = to_device(f.block_tables), dlens = to_device(lens);
    auto dsinks = to_device(sinks);
    const size_t per = size_t(n_head * head_dim);
    // window 0 / 8 / 300 (a window spanning a partition boundary), cap 0 / 50, sinks or not
    for (int32_t window : {0, 8, 300}) {
      for (float cap : {0.0f, 50.0f}) {
        for (bool with_sinks : {false, true}) {
          CAPTURE(head_dim);
          CAPTURE(window);
          CAPTURE(cap);
          CAPTURE(with_sinks);
          cu::attention_options ro{window, cap, with_sinks ? sinks.data() : nullptr};
          cu::attention_options co{window, cap, with_sinks ? dsinks.as<float>() : nullptr};
          const auto q = test::random_floats(size_t(n_seqs) * per, rng);
          std::vector<float> expect(q.size());
          ref::attention_decode(q.data(), f.k.data(), f.v.data(), f.block_tables.data(), f.max_blocks, lens.data(),
                                n_seqs, n_head, n_head_kv, head_dim, block_size, scale, expect.data(), ro);
          auto dq = to_device(q);
          cu::device_buffer ws(cu::attention_decode_workspace_floats(n_seqs, n_head, head_dim, max_len) * 4);
          cu::device_buffer dout(q.size() * 4);
          cu::attention_decode(dq.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                               dlens.as<int32_t>(), n_seqs, max_len, n_head, n_head_kv, head_dim, block_size, scale,
                               ws.as<float>(), dout.as<float>(), nullptr, co);
          const auto got = from_device<float>(dout, q.size());
          CHECK(rel_err(got, expect) < 2e-3);
          // Sequence 3 alone (one partition: normalised in the partial kernel) gives the batched bits.
          cu::device_buffer dout1(per * 4);
          cu::attention_decode(dq.as<float>() + 3 * per, dk.as<float>(), dv.as<float>(),
                               dtab.as<int32_t>() + 3 * f.max_blocks, f.max_blocks, dlens.as<int32_t>() + 3, 1, lens[3],
                               n_head, n_head_kv, head_dim, block_size, scale, ws.as<float>(), dout1.as<float>(),
                               nullptr, co);
          const auto solo = from_device<float>(dout1, per);
          CHECK(std::memcmp(solo.data(), got.data() + 3 * per, per * 4) == 0);

          const std::vector<int32_t> n_past = {0, 650, 0, 0};
          const std::vector<int32_t> q_start = {0, 1, 51, 1551, 1588};
          const auto qp = test::random_floats(size_t(q_start.back()) * per, rng);
          std::vector<float> expp(qp.size());
          ref::attention_prefill(qp.data(), f.k.data(), f.v.data(), f.block_tables.data(), f.max_blocks, q_start.data(),
                                 n_past.data(), n_seqs, n_head, n_head_kv, head_dim, block_size, scale, expp.data(),
                                 ro);
          auto dqp = to_device(qp), dqs = to_device(q_start), dnp = to_device(n_past);
          cu::device_buffer doutp(qp.size() * 4);
          cu::attention_prefill(dqp.as<float>(), dk.as<float>(), dv.as<float>(), dtab.as<int32_t>(), f.max_blocks,
                                dqs.as<int32_t>(), dnp.as<int32_t>(), n_seqs, 1500, n_head, n_head_kv, head_dim,
                                block_size, scale, doutp.as<float>(), nullptr, co);
          CHECK(rel_err(from_device<float>(doutp, qp.size()), expp) < 2e-3);
        }
      }
    }
  }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("rope_kv_write_table: angles from a table (with a magnitude), NoPE writes only") {
  require_device();
  std::mt19937 rng(27);
  const int32_t n_tokens = 5, n_head = 4, n_head_kv = 2, head_dim = 64, block_size = 16, max_blocks = 4;
  const int32_t row = n_head_kv * head_dim;
  const std::vector<int32_t> pos = {0, 1, 17, 40, 63}, tok_seq = {0, 0, 0, 1, 1};
  const std::vector<int32_t> tables = {0, 1, 2, 3, 4, 5, 6, 7};
  for (bool neox : {false, true}) {
    for (int32_t n_rot : {64, 32, 0}) {  // 0: a NoPE layer (inv_freq nullptr)
      CAPTURE(neox);
      CAPTURE(n_rot);
      std::vector<float> inv(size_t(std::max(n_rot / 2, 1)));
      for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = std::pow(10000.0f, -2.0f * float(i) / float(std::max(n_rot, 2))) / 1.5f;
      const float mscale = n_rot == 32 ? 1.2f : 1.0f;
      auto q = test::random_floats(size_t(n_tokens * n_head * head_dim), rng);
      auto k = test::random_floats(size_t(n_tokens * row), rng);
      const auto v = test::random_floats(size_t(n_tokens * row), rng);
      std::vector<float> kc(size_t(8 * block_size * row)), vc(kc.size());
      auto dq = to_device(q), dk = to_device(k), dv = to_device(v), dpos = to_device(pos), dts = to_device(tok_seq);
      auto dtab = to_device(tables), dinv = to_device(inv), dkc = to_device(kc), dvc = to_device(vc);
      ref::rope_kv_write_table(q.data(), k.data(), v.data(), pos.data(), tok_seq.data(), tables.data(), max_blocks,
                               n_tokens, n_head, n_head_kv, head_dim, n_rot, neox, n_rot ? inv.data() : nullptr, mscale,
                               block_size, kc.data(), vc.data());
      cu::rope_kv_write_table(dq.as<float>(), dk.as<float>(), dv.as<float>(), dpos.as<int32_t>(), dts.as<int32_t>(),
                              dtab.as<int32_t>(), max_blocks, n_tokens, n_head, n_head_kv, head_dim, n_rot, neox,
                              n_rot ? dinv.as<float>() : nullptr, mscale, block_size, dkc.as<float>(), dvc.as<float>(),
                              nullptr);
      CHECK(rel_err(from_device<float>(dq, q.size()), q) < 1e-6);
      CHECK(rel_err(from_device<float>(dkc, kc.size()), kc) < 1e-6);
      CHECK(from_device<float>(dvc, vc.size()) == vc);
    }
  }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE(
    "MoE ops: moe_matvec (every type; bitwise matvec on the chosen expert), expert biases, clamped SwiGLU, "
    "weighted sum") {
  require_device();
  std::mt19937 rng(28);
  const weight_type types[] = {weight_type::f32,  weight_type::f16,  weight_type::bf16, weight_type::q8_0,
                               weight_type::q4_k, weight_type::q6_k, weight_type::q4_0, weight_type::mxfp4};
  const int32_t n_expert = 6, k = 2, n_tok = 3, n_out = 40, n_in = 256;
  const std::vector<int32_t> ids = {5, 0, 2, 5, 3, 1};  // [n_tok][k]
  for (weight_type t : types) {
    CAPTURE(int(t));
    const auto w = test::random_weights(t, int64_t(n_expert) * n_out, n_in, rng);
    const auto x = test::random_floats(size_t(n_tok * n_in), rng);
    std::vector<float> expect(size_t(n_tok * k * n_out));
    ref::moe_matvec(t, w.data(), n_out, n_in, x.data(), k, ids.data(), n_tok * k, expect.data());
    auto dw = to_device(w), dx = to_device(x), did = to_device(ids);
    cu::device_buffer dy(expect.size() * 4);
    cu::moe_matvec(t, dw.data(), n_out, n_in, dx.as<float>(), k, did.as<int32_t>(), n_tok * k, dy.as<float>(), nullptr);
    const auto got = from_device<float>(dy, expect.size());
    CHECK(rel_err(got, expect) < (t == weight_type::f32 ? 1e-5 : 1e-3));
    // Row (token 1, slot 0) is expert 2 on x[1]: matvec on that expert alone gives the same bits.
    cu::device_buffer d1(size_t(n_out) * 4);
    cu::matvec(t, static_cast<const uint8_t*>(dw.data()) + size_t(2) * n_out * cu::row_bytes(t, n_in), n_out, n_in,
               dx.as<float>() + n_in, 1, d1.as<float>(), nullptr);
    const auto one = from_device<float>(d1, size_t(n_out));
    CHECK(std::memcmp(one.data(), got.data() + size_t(2) * n_out, size_t(n_out) * 4) == 0);
  }
  {
    const int32_t n = 33;
    auto y = test::random_floats(size_t(n_tok * k * n), rng);
    const auto b = test::random_floats(size_t(n_expert * n), rng);
    const auto wts = test::random_floats(size_t(n_tok * k), rng, 0.0f, 1.0f);
    auto dy = to_device(y), db = to_device(b), did = to_device(ids), dwt = to_device(wts);
    ref::add_rows_by_id(y.data(), b.data(), ids.data(), n_tok * k, n);
    cu::add_rows_by_id(dy.as<float>(), db.as<float>(), did.as<int32_t>(), n_tok * k, n, nullptr);
    CHECK(from_device<float>(dy, y.size()) == y);
    std::vector<float> sum(size_t(n_tok * n));
    ref::moe_combine(y.data(), wts.data(), n_tok, k, n, sum.data());
    cu::device_buffer ds(sum.size() * 4);
    cu::moe_combine(dy.as<float>(), dwt.as<float>(), n_tok, k, n, ds.as<float>(), nullptr);
    CHECK(from_device<float>(ds, sum.size()) == sum);  // each product rounded, added in rank order: exact
  }
  {
    const int64_t n = 10007;
    const auto g = test::random_floats(size_t(n), rng, -10.0f, 10.0f),
               u = test::random_floats(size_t(n), rng, -10.0f, 10.0f);
    std::vector<float> expect(static_cast<size_t>(n));
    ref::swiglu_oai(g.data(), u.data(), expect.data(), n);
    auto dg = to_device(g), du = to_device(u);
    cu::swiglu_oai(dg.as<float>(), du.as<float>(), dg.as<float>(), n, nullptr);
    CHECK(rel_err(from_device<float>(dg, size_t(n)), expect) < 1e-5);
  }
  CHECK_FALSE(cu::cuda_failed());
}

TEST_CASE("MoE rows grouped by expert (moe_group, moe_matvec_grouped): the reference's grouping, moe_matvec's bits") {
  require_device();
  std::mt19937 rng(29);
  const weight_type types[] = {weight_type::f32,  weight_type::f16,  weight_type::bf16, weight_type::q8_0,
                               weight_type::q4_k, weight_type::q6_k, weight_type::q4_0, weight_type::mxfp4};
  // 37 tokens x 4 of 6 experts: most experts get more rows than one chunk holds; expert 5 none.
  const int32_t n_expert = 6, k = 4, n_tok = 37, n_out = 40, n_in = 256, n_rows = n_tok * k;
  std::vector<int32_t> ids(static_cast<size_t>(n_rows));
  for (int32_t t = 0; t < n_tok; ++t)
    for (int32_t j = 0; j < k; ++j) ids[size_t(t * k + j)] = (t + j * (t % 3 + 1)) % (n_expert - 1);
  const int32_t max_chunks = cu::moe_group_max_chunks(n_rows, n_expert), per = cu::moe_group_rows_per_chunk();
  std::vector<int32_t> order(static_cast<size_t>(n_rows)), chunks(1 + 3 * size_t(max_chunks), -1);
  ref::moe_group(ids.data(), n_rows, n_expert, per, order.data(), chunks.data());
  REQUIRE(chunks[0] <= max_chunks);
  auto did = to_device(ids);
  cu::device_buffer dorder(order.size() * 4), dchunks(chunks.size() * 4);
  cu::moe_group(did.as<int32_t>(), n_rows, n_expert, dorder.as<int32_t>(), dchunks.as<int32_t>(), nullptr);
  CHECK(from_device<int32_t>(dorder, order.size()) == order);
  const auto got_chunks = from_device<int32_t>(dchunks, size_t(1 + 3 * chunks[0]));
  CHECK(std::vector<int32_t>(chunks.begin(), chunks.begin() + 1 + 3 * chunks[0]) == got_chunks);
  for (weight_type t : types) {
    CAPTURE(int(t));
    const auto w = test::random_weights(t, int64_t(n_expert) * n_out, n_in, rng);
    const auto x = test::random_floats(size_t(n_tok * n_in), rng);
    auto dw = to_device(w), dx = to_device(x);
    cu::device_buffer dy(size_t(n_rows) * n_out * 4), dg(size_t(n_rows) * n_out * 4);
    cu::moe_matvec(t, dw.data(), n_out, n_in, dx.as<float>(), k, did.as<int32_t>(), n_rows, dy.as<float>(), nullptr);
    cu::moe_matvec_grouped(t, dw.data(), n_out, n_in, dx.as<float>(), k, dorder.as<int32_t>(), dchunks.as<int32_t>(),
                           max_chunks, dg.as<float>(), nullptr);
    const auto per_row = from_device<float>(dy, size_t(n_rows) * n_out);
    const auto grouped = from_device<float>(dg, size_t(n_rows) * n_out);
    CHECK(std::memcmp(per_row.data(), grouped.data(), per_row.size() * 4) == 0);
    // x_div 1 (the down projection over the activations, one vector per row)
    const auto h = test::random_floats(size_t(n_rows) * n_in, rng);
    auto dh = to_device(h);
    cu::moe_matvec(t, dw.data(), n_out, n_in, dh.as<float>(), 1, did.as<int32_t>(), n_rows, dy.as<float>(), nullptr);
    cu::moe_matvec_grouped(t, dw.data(), n_out, n_in, dh.as<float>(), 1, dorder.as<int32_t>(), dchunks.as<int32_t>(),
                           max_chunks, dg.as<float>(), nullptr);
    CHECK(from_device<float>(dy, per_row.size()) == from_device<float>(dg, per_row.size()));
  }
  CHECK_FALSE(cu::cuda_failed());
}

#else  // built without the CUDA backend

TEST_CASE("cuda family ops: built without CUDA") {
  std::fprintf(stderr, "built without CUDA: skipped\n");
  std::exit(77);
}

#endif
