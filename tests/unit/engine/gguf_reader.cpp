// GGUF reader: the shared tiny model reads correctly; every truncation and a
// sample of corruptions are refused with a message, never a crash.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "gguf/reader.h"
#include "test_env.h"

using namespace agentq;

static std::vector<uint8_t> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_CASE("reads the shared tiny llama") {
  std::string err;
  auto f = gguf::file::open(test::tiny_model().string(), &err);
  REQUIRE_MESSAGE(f, err);
  CHECK(f->version() == 3);
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_int("llama.block_count") == 5);
  CHECK(f->get_int("llama.embedding_length") == 64);
  CHECK(f->get_int("llama.attention.head_count") == 8);
  CHECK(f->get_int("llama.attention.head_count_kv") == 4);
  const gguf::value* toks = f->find("tokenizer.ggml.tokens");
  REQUIRE(toks);
  CHECK(toks->strs.size() == 512);
  const gguf::tensor_info* emb = f->find_tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->dims == std::vector<int64_t>{64, 512});
  CHECK(emb->type == gguf::tensor_type::f32);
  CHECK(emb->n_bytes == 64 * 512 * 4);
}

TEST_CASE("missing and empty files give clear errors") {
  std::string err;
  CHECK_FALSE(gguf::file::open("/nonexistent/model.gguf", &err));
  CHECK(err.find("cannot open") != std::string::npos);
}

TEST_CASE("every truncation is refused cleanly") {
  auto bytes = slurp(test::tiny_model());
  REQUIRE(bytes.size() > 1000);
  // Every prefix through the header and metadata, then a stride through the data.
  for (size_t n = 0; n < bytes.size(); n += (n < 20000 ? 1 : 4093)) {
    std::string err;
    auto f = gguf::file::parse(bytes.data(), n, &err);
    CHECK_MESSAGE(!f, "prefix ", n, " parsed");
    CHECK(!err.empty());
  }
}

TEST_CASE("corrupted counts and types are refused") {
  auto bytes = slurp(test::tiny_model());
  std::string err;
  auto corrupt = bytes;
  corrupt[0] = 'X';
  CHECK_FALSE(gguf::file::parse(corrupt.data(), corrupt.size(), &err));
  CHECK(err.find("magic") != std::string::npos);

  corrupt = bytes;
  corrupt[4] = 9;  // version
  CHECK_FALSE(gguf::file::parse(corrupt.data(), corrupt.size(), &err));
  CHECK(err.find("version") != std::string::npos);

  corrupt = bytes;
  for (int i = 0; i < 8; ++i) corrupt[8 + i] = 0xff;  // tensor count
  CHECK_FALSE(gguf::file::parse(corrupt.data(), corrupt.size(), &err));
  CHECK(err.find("tensor count") != std::string::npos);

  // Flip bytes one at a time through the header region: never a crash.
  for (size_t i = 0; i < 4096 && i < bytes.size(); ++i) {
    corrupt = bytes;
    corrupt[i] ^= 0xA5;
    auto f = gguf::file::parse(corrupt.data(), corrupt.size(), &err);
    (void)f;
  }
}
