// engine_config::device: "cpu" is the default and runs exactly the CPU model (the
// backend seam adds nothing to its numbers); a CUDA device in a build without CUDA, or on
// a machine without a GPU, fails load() with a message naming the device — never a silent
// CPU fallback; malformed device strings are rejected. (GPU runs: tests/gpu/engine_cuda_parity.)
#include <doctest/doctest.h>

#include <cstring>

#include "agentq/kernels_cuda.h"
#include "backend/backend.h"
#include "engine_impl.h"
#include "gguf/reader.h"
#include "golden.h"
#include "test_env.h"

using namespace agentq;

namespace {

engine_config tiny_config(const std::string& device) {
  return test::tiny_config(device, 8ull << 20);
}

}  // namespace

TEST_CASE("device strings: cpu, cuda, cuda:N; anything else is an error") {
  device_spec d;
  std::string err;
  REQUIRE(parse_device("cpu", &d, &err));
  CHECK(d.kind == device_spec::cpu);
  REQUIRE(parse_device("cuda", &d, &err));
  CHECK((d.kind == device_spec::cuda && d.ordinal == 0));
  REQUIRE(parse_device("cuda:3", &d, &err));
  CHECK((d.kind == device_spec::cuda && d.ordinal == 3));
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:12345"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_device(bad, &d, &err));
    CHECK(err.find("expected cpu, cuda or cuda:N") != std::string::npos);
  }
  std::string lerr;
  CHECK_FALSE(engine::load(tiny_config("tpu"), &lerr));
  CHECK(lerr == "unknown device 'tpu' (expected cpu, cuda or cuda:N)");
}

TEST_CASE("device cuda without CUDA (build or GPU) fails load with a clear message") {
#if AGENTQ_HAVE_CUDA
  const bool have_gpu = kernels::cuda::device_count() > 0;
#else
  const bool have_gpu = false;
#endif
  for (const char* dev : {"cuda", "cuda:0", "cuda:7"}) {
    CAPTURE(dev);
    std::string err;
    auto e = engine::load(tiny_config(dev), &err);
    if (have_gpu && std::strcmp(dev, "cuda:7") != 0) {
      REQUIRE_MESSAGE(e, err);
      CHECK(e->model().device.rfind("cuda:0", 0) == 0);
      continue;
    }
    CHECK_FALSE(e);
    MESSAGE(err);
    CHECK(err.find(std::string("device '") + dev + "'") != std::string::npos);
#if !AGENTQ_HAVE_CUDA
    CHECK(err.find("this build has no CUDA backend") != std::string::npos);
#else
    if (!have_gpu)
      CHECK(err.find("no CUDA device found") != std::string::npos);
    else
      CHECK(err.find("does not exist") != std::string::npos);
#endif
  }
}

TEST_CASE("kv_type: f16 on the CPU by default (half the bytes per block), f32 on request, anything else refused") {
  std::string err;
  auto dflt = engine::load(tiny_config("cpu"), &err);
  REQUIRE_MESSAGE(dflt, err);
  auto* d = dynamic_cast<engine_impl*>(dflt.get());
  REQUIRE(d);
  CHECK(d->pool().layout().dtype == kv_dtype::f16);
  CHECK(dflt->model().kv_type == "f16");
  CHECK(dflt->model().kv_capacity_tokens == int64_t(d->pool().n_blocks_total()) * d->pool().layout().block_size);
  engine_config c = tiny_config("cpu");
  c.kv_type = "f32";
  auto f32 = engine::load(c, &err);
  REQUIRE_MESSAGE(f32, err);
  auto* f = dynamic_cast<engine_impl*>(f32.get());
  REQUIRE(f);
  CHECK(f->pool().layout().dtype == kv_dtype::f32);
  CHECK(f32->model().kv_type == "f32");
  CHECK(f->pool().layout().block_bytes() == 2 * d->pool().layout().block_bytes());
  // The same budget holds twice the blocks (tokens) in F16.
  CHECK(d->pool().n_blocks_total() >= 2 * f->pool().n_blocks_total());
  for (const char* bad : {"f8", "F16", "", "q8_0"}) {
    if (!*bad) continue;  // empty = the device's default
    CAPTURE(bad);
    c.kv_type = bad;
    CHECK_FALSE(engine::load(c, &err));
    CHECK(err == std::string("unknown kv_type '") + bad + "' (expected f16 or f32)");
  }
}

TEST_CASE("device cpu: the default, healthy, and bit-identical to model::forward") {
  std::string err;
  CHECK(engine_config{}.device == "cpu");
  auto base = engine::load(tiny_config("cpu"), &err);
  REQUIRE_MESSAGE(base, err);
  auto& e = static_cast<engine_impl&>(*base);
  CHECK(e.model().device == "cpu");
  CHECK(e.healthy());
  CHECK(e.stats().healthy);
  CHECK(e.pool().store().n_blocks() == e.pool().n_blocks_total());  // host blocks: the CPU model's kv_store

  // The backend's forward over its kv() against model::forward over a kv_store of its own.
  std::shared_ptr<const gguf::file> file = gguf::file::open(test::tiny_model().string(), &err);
  REQUIRE_MESSAGE(file, err);
  auto be = forward_backend::create("cpu", file, 2, &err);
  REQUIRE_MESSAGE(be, err);
  auto m = model::load(file, 2, &err);
  REQUIRE_MESSAGE(m, err);
  const int32_t n_blocks = 16, n_vocab = m->hparams().n_vocab;
  REQUIRE(be->alloc_kv(16, n_blocks, &err));
  kv_store kv(m->kv_layout_for(16), n_blocks);
  std::vector<int32_t> table = {3, 1, 4, 0, 5, 9, 2, 6};
  const auto prompt = test::load_golden().at(2).prompt_ids;
  std::vector<float> a(prompt.size() * size_t(n_vocab)), b(a.size());
  batch_seq s{table.data(), 0, prompt.data(), int32_t(prompt.size()), true};
  REQUIRE(be->forward({&s, 1}, a.data()) == int32_t(prompt.size()));
  REQUIRE(m->forward({&s, 1}, kv, b.data()) == int32_t(prompt.size()));
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  CHECK(be->failure().empty());
  CHECK(be->device() == "cpu");
}

TEST_CASE("kv_store block copies: read_blocks / write_blocks round trip in the spill layout; copy_rows") {
  const kv_layout L{2, 2, 4, 4};
  kv_store kv(L, 6);
  for (int32_t l = 0; l < L.n_layer; ++l)
    for (int32_t b = 0; b < 6; ++b)
      for (int64_t i = 0; i < L.block_elems(); ++i) {
        kv.k(l, b)[i] = float(1000 * l + 100 * b + i);
        kv.v(l, b)[i] = -float(1000 * l + 100 * b + i);
      }
  const std::vector<int32_t> src = {4, 1};
  std::vector<float> buf(src.size() * 2 * size_t(L.n_layer) * size_t(L.block_elems()));
  REQUIRE(kv.read_blocks(src, buf.data()));
  // [block][layer][K, V][block_elems]
  CHECK(buf[0] == kv.k(0, 4)[0]);
  CHECK(buf[size_t(L.block_elems())] == kv.v(0, 4)[0]);
  CHECK(buf[2 * size_t(L.block_elems())] == kv.k(1, 4)[0]);
  CHECK(buf[4 * size_t(L.block_elems()) + 3] == kv.k(0, 1)[3]);
  const std::vector<int32_t> dst = {0, 5};
  REQUIRE(kv.write_blocks(dst, buf.data()));
  for (int32_t l = 0; l < L.n_layer; ++l) {
    CHECK(std::memcmp(kv.k(l, 0), kv.k(l, 4), size_t(L.block_elems()) * 4) == 0);
    CHECK(std::memcmp(kv.v(l, 5), kv.v(l, 1), size_t(L.block_elems()) * 4) == 0);
  }
  kv.copy_rows(2, 3, 1);  // one token row of every layer
  CHECK(kv.k(1, 3)[L.row() - 1] == kv.k(1, 2)[L.row() - 1]);
  CHECK(kv.k(1, 3)[L.row()] != kv.k(1, 2)[L.row()]);
}

TEST_CASE("kv_store, head-major F16 blocks: copy_rows copies the first tokens of every head, nothing else") {
  kv_layout L{2, 3, 8, 4, kv_dtype::f16, true};
  CHECK(L.token_stride() == 8);
  CHECK(L.elem_offset(1, 2) == (2 * 4 + 1) * 8);
  CHECK(L.block_bytes() == 2 * 2 * 4 * 3 * 8 * 2);
  kv_store kv(L, 3);
  for (int32_t l = 0; l < L.n_layer; ++l)
    for (int32_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < L.block_elems(); ++i) {
        kv.k<uint16_t>(l, b)[i] = uint16_t(1000 * l + 100 * b + i);
        kv.v<uint16_t>(l, b)[i] = uint16_t(30000 + 1000 * l + 100 * b + i);
      }
  kv.copy_rows(0, 2, 3);  // tokens 0..2 of block 0 into block 2
  for (int32_t l = 0; l < L.n_layer; ++l)
    for (int32_t h = 0; h < L.n_head_kv; ++h)
      for (int32_t t = 0; t < L.block_size; ++t)
        for (int32_t d = 0; d < L.head_dim; ++d) {
          CAPTURE(l);
          CAPTURE(h);
          CAPTURE(t);
          const int64_t o = L.elem_offset(t, h) + d;
          const int32_t from = t < 3 ? 0 : 2;
          CHECK(kv.k<uint16_t>(l, 2)[o] == uint16_t(1000 * l + 100 * from + o));
          CHECK(kv.v<uint16_t>(l, 2)[o] == uint16_t(30000 + 1000 * l + 100 * from + o));
        }
}
