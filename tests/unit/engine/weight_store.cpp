// model/weights.h weight_store: a model's tensor data copied onto 2 MiB pages keeps every
// byte and offset; AGENTQ_WEIGHTS=mmap and small files keep the mapping.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/weights.h"
#include "temp_dir.h"

using namespace agentq;
using agentq::test::temp_dir;

namespace {

// A file with two F32 tensors of n floats each, filled with a known pattern.
std::string write_file(const temp_dir& dir, const std::string& name, int64_t n) {
  const std::string path = dir.file(name);
  gguf::writer w;
  w.set_string("general.architecture", "llama");
  w.add_tensor("a", gguf::tensor_type::f32, {n});
  w.add_tensor("b", gguf::tensor_type::f32, {n});
  std::string err;
  REQUIRE(w.open(path, &err));
  for (int t = 0; t < 2; ++t) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i % 1000) + 0.5f * float(t);
    REQUIRE(w.write_tensor_data(v.data(), v.size() * 4, &err));
  }
  REQUIRE(w.close(&err));
  return path;
}

}  // namespace

TEST_CASE("weight_store copies tensor data onto huge pages, byte for byte") {
  temp_dir dir;
  const std::string path = write_file(dir, "big.gguf", int64_t(1) << 20);  // 2 x 4 MiB
  std::string err;
  auto f = gguf::file::open(path, &err);
  REQUIRE(f);
  weight_store store;
  store.load(*f);
  if (!kernels::huge_pages_enabled() || std::getenv("AGENTQ_WEIGHTS")) {
    MESSAGE("THP off or AGENTQ_WEIGHTS set: the mapping is kept");
    CHECK(store.bytes() == 0);
    return;
  }
  REQUIRE(store.bytes() >= size_t(8) << 20);
  for (const auto& t : f->tensors()) {
    const uint8_t* p = store.relocate(t.data);
    CHECK(p != t.data);
    CHECK(reinterpret_cast<uintptr_t>(p) % 32 == 0);
    CHECK(std::memcmp(p, t.data, t.n_bytes) == 0);
  }
  const uint8_t outside = 0;
  CHECK(store.relocate(&outside) == &outside);
}

TEST_CASE("weight_store keeps small files and AGENTQ_WEIGHTS=mmap in the mapping") {
  temp_dir dir;
  std::string err;
  auto small = gguf::file::open(write_file(dir, "small.gguf", 1024), &err);
  REQUIRE(small);
  weight_store a;
  a.load(*small);
  CHECK(a.bytes() == 0);
  CHECK(a.relocate(small->tensors()[0].data) == small->tensors()[0].data);

  auto big = gguf::file::open(write_file(dir, "big.gguf", int64_t(1) << 20), &err);
  REQUIRE(big);
  const char* old = std::getenv("AGENTQ_WEIGHTS");
  const std::string saved = old ? old : "";
  setenv("AGENTQ_WEIGHTS", "mmap", 1);
  weight_store b;
  b.load(*big);
  if (old)
    setenv("AGENTQ_WEIGHTS", saved.c_str(), 1);
  else
    unsetenv("AGENTQ_WEIGHTS");
  CHECK(b.bytes() == 0);
  CHECK(b.relocate(big->tensors()[1].data) == big->tensors()[1].data);
}

// A Q4_K matrix with a multiple of 8 rows is repacked (kernels::q4_k_x8) whether or not the
// rest is copied; matmul over the repacked copy agrees with the file's rows.
TEST_CASE("weight_store repacks the tensors its layout function names") {
  temp_dir dir;
  const std::string path = dir.file("q4k.gguf");
  const int64_t rows = 16, cols = 512;
  std::vector<float> vals(size_t(rows * cols));
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = std::sin(0.37f * float(i)) * 0.05f;
  std::vector<uint8_t> q(kernels::matrix_bytes(kernels::weight_type::q4_k, rows, cols));
  for (int64_t r = 0; r < rows; ++r)
    kernels::quantize_row(kernels::weight_type::q4_k, vals.data() + r * cols,
                          q.data() + r * kernels::row_bytes(kernels::weight_type::q4_k, cols), cols);
  {
    gguf::writer w;
    w.set_string("general.architecture", "llama");
    w.add_tensor("m", gguf::tensor_type::q4_k, {cols, rows});
    w.add_tensor("v", gguf::tensor_type::f32, {cols});
    std::string err;
    REQUIRE(w.open(path, &err));
    REQUIRE(w.write_tensor_data(q.data(), q.size(), &err));
    REQUIRE(w.write_tensor_data(vals.data(), size_t(cols) * 4, &err));
    REQUIRE(w.close(&err));
  }
  std::string err;
  auto f = gguf::file::open(path, &err);
  REQUIRE(f);
  const auto& m = f->tensors()[0];
  const auto& v = f->tensors()[1];
  const auto x8 = kernels::preferred_layout(kernels::weight_type::q4_k, rows, cols);
  weight_store store;
  store.load(*f, [](const gguf::tensor_info& t) {
    const auto type = kernels::weight_type(uint32_t(t.type));
    return t.dims.size() == 2 ? kernels::preferred_layout(type, t.dims[1], t.dims[0]) : type;
  });
  CHECK(store.layout(v) == kernels::weight_type::f32);
  CHECK(store.relocate(v.data) == v.data);  // a small file: only what is repacked is copied
  if (x8 == kernels::weight_type::q4_k) {
    MESSAGE("no AVX2 kernels: Q4_K keeps the file layout");
    CHECK(store.bytes() == 0);
    return;
  }
  REQUIRE(store.layout(m) == kernels::weight_type::q4_k_x8);
  const uint8_t* p = store.relocate(m.data);
  CHECK(p != m.data);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  std::vector<float> x(static_cast<size_t>(cols)), y8(static_cast<size_t>(rows)), yf(static_cast<size_t>(rows));
  for (int64_t i = 0; i < cols; ++i) x[size_t(i)] = std::cos(0.11f * float(i));
  kernels::matmul(kernels::weight_type::q4_k_x8, p, kernels::row_bytes(kernels::weight_type::q4_k_x8, cols), cols,
                  x.data(), 1, y8.data(), 0, rows, rows);
  kernels::matmul(kernels::weight_type::q4_k, q.data(), kernels::row_bytes(kernels::weight_type::q4_k, cols), cols,
                  x.data(), 1, yf.data(), 0, rows, rows);
  for (int64_t r = 0; r < rows; ++r) CHECK(std::fabs(y8[size_t(r)] - yf[size_t(r)]) <= 1e-5f);
}
