// The GGUF fuzzer's seed corpus (tests/fuzz/corpus/gguf) replayed as a unit test: every seed
// parses, each type_* seed holds a tensor of its block format that dequantizes to finite or
// at least non-crashing values, and every truncation of a seed is refused, never a crash.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "test_env.h"

using namespace agentq;

TEST_CASE("GGUF seed corpus: the block-format seeds parse, dequantize, and refuse truncation") {
  const auto dir = test::source_dir() / "tests/fuzz/corpus/gguf";
  REQUIRE(std::filesystem::is_directory(dir));
  int n_type_seeds = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    CAPTURE(name);
    std::ifstream in(e.path(), std::ios::binary);
    const std::vector<uint8_t> buf{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::string err;
    auto f = gguf::file::parse(buf.data(), buf.size(), &err);
    if (name.rfind("type_", 0) != 0) continue;
    ++n_type_seeds;
    REQUIRE_MESSAGE(f, err);
    REQUIRE(f->tensors().size() == 1);
    const auto& t = f->tensors()[0];
    CHECK(std::string("type_") + kernels::name_of(kernels::weight_type(uint32_t(t.type))) == name);
    REQUIRE(kernels::is_weight_type(uint32_t(t.type)));
    std::vector<float> row(size_t(t.dims[0]));
    kernels::dequantize_row(kernels::weight_type(uint32_t(t.type)), t.data, row.data(), t.dims[0]);
    for (size_t cut = 0; cut < buf.size(); cut += 7) {
      std::string e2;
      CHECK_FALSE(gguf::file::parse(buf.data(), cut, &e2));
      CHECK_FALSE(e2.empty());
    }
  }
  CHECK(n_type_seeds == 10);
}
