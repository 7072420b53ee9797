// GGUF writer: a file with every metadata type and tensors of every weight type
// reads back through the reader with equal metadata and tensor bytes, and a real
// vocab's tokenizer metadata copies verbatim (agentq-mkgguf's test: mkgguf_cli.cpp).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("agentq_gguf_writer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("writer round-trips metadata of every type and tensor bytes") {
  gguf::writer w;
  w.set_string("general.architecture", "llama");
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 1ull << 60);
  w.set_i64("t.i64", -(1ll << 60));
  w.set_f32("t.f32", 0.15625f);
  w.set_f64("t.f64", -1e300);
  w.set_bool("t.bool", true);
  w.set_string("t.empty", "");
  w.set_strings("t.strs", {"a", "", "b\xc3\xa9", std::string_view("nul\0x", 5)});
  const int32_t ints[] = {1, -2, 3};
  w.set_array("t.i32s", gguf::value_type::i32, ints, 3);
  const float floats[] = {0.5f, -1.25f};
  w.set_array("t.f32s", gguf::value_type::f32, floats, 2);
  CHECK_THROWS_AS(w.set_u8("t.u8", 1), std::invalid_argument);

  struct t_spec { const char* name; kernels::weight_type type; std::vector<int64_t> dims; };
  const t_spec specs[] = {
      {"a.f32", kernels::weight_type::f32, {3}},
      {"b.f16", kernels::weight_type::f16, {5, 3}},
      {"c.bf16", kernels::weight_type::bf16, {7, 2}},
      {"d.q8_0", kernels::weight_type::q8_0, {64, 3}},
      {"e.q4_k", kernels::weight_type::q4_k, {256, 2}},
      {"f.q6_k", kernels::weight_type::q6_k, {512, 1, 2}},
  };
  std::vector<std::vector<uint8_t>> data;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (auto d : s.dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng);
    std::vector<uint8_t> bytes(kernels::row_bytes(s.type, s.dims[0]) * static_cast<size_t>(n / s.dims[0]));
    for (int64_t r = 0; r < n / s.dims[0]; ++r)
      kernels::quantize_row(s.type, v.data() + r * s.dims[0], bytes.data() + kernels::row_bytes(s.type, s.dims[0]) * r, s.dims[0]);
    const size_t idx = w.add_tensor(s.name, static_cast<gguf::tensor_type>(static_cast<uint32_t>(s.type)), s.dims);
    CHECK(w.tensor_bytes(idx) == bytes.size());
    data.push_back(std::move(bytes));
  }
  CHECK_THROWS_AS(w.add_tensor("bad", gguf::tensor_type::q4_k, {100}), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("a.f32", gguf::tensor_type::f32, {1}), std::invalid_argument);

  const fs::path path = temp_path("roundtrip.gguf");
  std::string err;
  REQUIRE_MESSAGE(w.open(path.string(), &err), err);
  CHECK_FALSE(w.write_tensor_data(data[0].data(), data[0].size() + 1, &err));  // size mismatch refused
  for (const auto& d : data) REQUIRE_MESSAGE(w.write_tensor_data(d.data(), d.size(), &err), err);
  REQUIRE_MESSAGE(w.close(&err), err);

  auto f = gguf::file::open(path.string(), &err);
  REQUIRE_MESSAGE(f, err);
  CHECK(f->version() == 3);
  CHECK(f->metadata().size() == w.n_kv());
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->find("t.u8")->type == gguf::value_type::u8);
  CHECK(f->get_int("t.u8") == 200);
  CHECK(f->get_int("t.i8") == -100);
  CHECK(f->get_int("t.u16") == 60000);
  CHECK(f->get_int("t.i16") == -30000);
  CHECK(f->get_int("t.u32") == 4000000000ll);
  CHECK(f->get_int("t.i32") == -2000000000);
  CHECK(f->find("t.u64")->u == (1ull << 60));
  CHECK(f->get_int("t.i64") == -(1ll << 60));
  CHECK(f->get_float("t.f32") == 0.15625);
  CHECK(f->get_float("t.f64") == -1e300);
  CHECK(f->get_bool("t.bool") == true);
  CHECK(f->get_string("t.empty") == "");
  const gguf::value* strs = f->find("t.strs");
  REQUIRE(strs);
  REQUIRE(strs->strs.size() == 4);
  CHECK(strs->strs[2] == "b\xc3\xa9");
  CHECK(strs->strs[3] == std::string_view("nul\0x", 5));
  const gguf::value* is = f->find("t.i32s");
  REQUIRE(is);
  CHECK(is->elem_type == gguf::value_type::i32);
  CHECK(is->n == 3);
  CHECK(is->at_i64(1) == -2);
  CHECK(f->find("t.f32s")->at_f64(1) == -1.25);

  REQUIRE(f->tensors().size() == std::size(specs));
  for (size_t i = 0; i < std::size(specs); ++i) {
    const gguf::tensor_info* t = f->find_tensor(specs[i].name);
    REQUIRE(t);
    CHECK(static_cast<uint32_t>(t->type) == static_cast<uint32_t>(specs[i].type));
    CHECK(t->dims == specs[i].dims);
    CHECK(t->offset % 32 == 0);
    REQUIRE(t->n_bytes == data[i].size());
    CHECK(std::memcmp(t->data, data[i].data(), data[i].size()) == 0);
  }
  fs::remove_all(path.parent_path());
}

TEST_CASE("set_value copies a real vocab's tokenizer metadata verbatim") {
  std::string err;
  auto voc = gguf::file::open((test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string(), &err);
  REQUIRE_MESSAGE(voc, err);
  gguf::writer w;
  size_t n = 0;
  for (const auto& [key, val] : voc->metadata())
    if (key.rfind("tokenizer.", 0) == 0) {
      w.set_value(key, val);
      ++n;
    }
  w.add_tensor("x", gguf::tensor_type::f32, {1});
  const fs::path path = temp_path("vocab.gguf");
  REQUIRE(w.open(path.string(), &err));
  const float z = 0;
  REQUIRE(w.write_tensor_data(&z, 4, &err));
  REQUIRE(w.close(&err));
  auto f = gguf::file::open(path.string(), &err);
  REQUIRE_MESSAGE(f, err);
  CHECK(f->metadata().size() == n);
  for (const auto& [key, val] : f->metadata()) {
    const gguf::value* o = voc->find(key);
    REQUIRE(o);
    CHECK(o->type == val.type);
    CHECK(o->elem_type == val.elem_type);
    CHECK(o->n == val.n);
    CHECK(o->strs == val.strs);
    CHECK(o->str == val.str);
    CHECK(o->i == val.i);
    for (uint64_t i = 0; o->raw && i < o->n; ++i) REQUIRE(o->at_f64(i) == val.at_f64(i));
  }
  CHECK(f->find("tokenizer.ggml.tokens")->strs.size() == 32000);
  fs::remove_all(path.parent_path());
}
