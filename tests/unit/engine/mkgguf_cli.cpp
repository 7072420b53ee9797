// agentq-mkgguf writes a loadable Llama / Qwen2 file with a real vocab's tokenizer, the
// reader accepts it and its weights are sane. Exits 77 (skipped) when the binary is not built;
// its own file so that skipping cannot hide the writer tests' results.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "test_env.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("agentq_mkgguf_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("agentq-mkgguf writes a Llama file the reader accepts") {
  const fs::path bin = test::bin_dir() / "agentq-mkgguf";
  if (!fs::exists(bin)) {
    std::fprintf(stderr, "skipped: %s not built (build the agentq-mkgguf target)\n", bin.string().c_str());
    std::exit(77);
  }
  for (const char* arch : {"llama", "qwen2"}) {
    const fs::path path = temp_path(std::string("tiny_") + arch + ".gguf");
    // q4_k for llama (slow reference quantizer), q8_0 for qwen2 to keep the test quick
    const std::string type = std::string(arch) == "llama" ? "q4_k" : "q8_0";
    const std::string cmd = bin.string() + " --out " + path.string() + " --shape tiny --type " + type + " --seed 7 --arch " + arch +
                            " --vocab " + (test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string() + " > /dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::string err;
    auto f = gguf::file::open(path.string(), &err);
    REQUIRE_MESSAGE(f, err);
    const std::string a = arch;
    CHECK(f->get_string("general.architecture") == a);
    CHECK(f->get_int(a + ".embedding_length") == 256);
    CHECK(f->get_int(a + ".block_count") == 2);
    CHECK(f->get_int(a + ".attention.head_count") == 4);
    CHECK(f->get_int(a + ".attention.head_count_kv") == 2);
    CHECK(f->get_int(a + ".feed_forward_length") == 512);
    CHECK(f->get_int(a + ".rope.dimension_count") == 64);
    CHECK(f->get_float(a + ".attention.layer_norm_rms_epsilon").has_value());
    CHECK(f->find("tokenizer.ggml.tokens")->strs.size() == 32000);
    const auto* q = f->find_tensor("blk.1.attn_q.weight");
    REQUIRE(q);
    CHECK(q->type == (type == "q4_k" ? gguf::tensor_type::q4_k : gguf::tensor_type::q8_0));
    CHECK(q->dims == std::vector<int64_t>{256, 256});
    CHECK(f->find_tensor("blk.0.attn_k.weight")->dims == std::vector<int64_t>{256, 128});
    CHECK(f->find_tensor("blk.0.ffn_down.weight")->dims == std::vector<int64_t>{512, 256});
    CHECK(f->find_tensor("token_embd.weight")->dims == std::vector<int64_t>{256, 32000});
    CHECK(f->find_tensor("output_norm.weight")->type == gguf::tensor_type::f32);
    CHECK((f->find_tensor("blk.0.attn_q.bias") != nullptr) == (a == "qwen2"));
    // Weights are sane: norm weights 1, matrices ~N(0, 0.02).
    const auto* norm = f->find_tensor("blk.0.ffn_norm.weight");
    CHECK(reinterpret_cast<const float*>(norm->data)[5] == 1.0f);
    std::vector<float> row(256);
    kernels::dequantize_row(static_cast<kernels::weight_type>(static_cast<uint32_t>(q->type)), q->data, row.data(), 256);
    double ss = 0;
    for (float v : row) ss += double(v) * v;
    CHECK(std::sqrt(ss / 256) == doctest::Approx(0.02).epsilon(0.3));
    fs::remove(path);
  }
  fs::remove_all(temp_path("").parent_path());
}

// SHAPE-copy (gguf/copy_circuit.h): the same tensor list, sizes and types as SHAPE (so a forward
// costs the same), other weights; llama only. What it does is tests/unit/engine/engine_spec_copy.cpp's.
TEST_CASE("agentq-mkgguf --shape X-copy: the same tensors as X, llama only") {
  const fs::path bin = test::bin_dir() / "agentq-mkgguf";
  if (!fs::exists(bin)) {
    std::fprintf(stderr, "skipped: %s not built (build the agentq-mkgguf target)\n", bin.string().c_str());
    std::exit(77);
  }
  const std::string vocab = " --vocab " + (test::shared_dir() / "models/vocab/ggml-vocab-llama-spm.gguf").string();
  const fs::path plain = temp_path("15m.gguf"), copy = temp_path("15m-copy.gguf");
  REQUIRE(std::system((bin.string() + " --out " + plain.string() + " --shape 15m --type q8_0" + vocab + " > /dev/null").c_str()) == 0);
  REQUIRE(std::system((bin.string() + " --out " + copy.string() + " --shape 15m-copy --type q8_0" + vocab + " > /dev/null").c_str()) == 0);
  std::string err;
  auto a = gguf::file::open(plain.string(), &err), b = gguf::file::open(copy.string(), &err);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(a->tensors().size() == b->tensors().size());
  bool same_data = true;
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto &x = a->tensors()[i], &y = b->tensors()[i];
    CHECK(x.name == y.name);
    CHECK(x.type == y.type);
    CHECK(x.dims == y.dims);
    same_data = same_data && x.n_bytes == y.n_bytes && std::memcmp(x.data, y.data, x.n_bytes) == 0;
  }
  CHECK(!same_data);
  CHECK(b->get_string("general.name") == "agentq-synthetic-15m-copy-q8_0");
  // other architectures and the parity shape are refused
  CHECK(std::system((bin.string() + " --out " + copy.string() + " --shape 15m-copy --type q8_0 --arch qwen2" + vocab + " 2> /dev/null").c_str()) != 0);
  CHECK(std::system((bin.string() + " --out " + copy.string() + " --shape parity-copy --type f32" + vocab + " 2> /dev/null").c_str()) != 0);
  fs::remove_all(temp_path("").parent_path());
}
