// The CUDA backend runs only the families registry.cpp marks for it (llama, qwen2): every other
// registered architecture is refused with "architecture X not supported on cuda yet", never run
// wrong. Exits 77 (skipped) without a device, without CUDA, or without the vocab for the model.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "test_env.h"

#if AGENTQ_HAVE_CUDA

#include "agentq/kernels_cuda.h"
#include "backend/cuda_forward.h"
#include "gguf/reader.h"
#include "gguf/synthetic.h"
#include "model/registry.h"

using namespace agentq;
namespace fs = std::filesystem;

TEST_CASE("cuda refuses the architectures it does not implement, by name") {
  if (kernels::cuda::device_count() == 0) test::skip("no CUDA device");
  fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) vocab = test::source_dir() / "shared" / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing");
  const fs::path dir = fs::temp_directory_path() / ("agentq_cuda_families_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& a : architectures()) {
    if (a.cuda) continue;
    CAPTURE(a.name);
    const fs::path path = dir / (std::string(a.name) + ".gguf");
    std::string err;
    REQUIRE_MESSAGE(gguf::write_synthetic(gguf::parity_spec(a.name, 1, vocab.string()), path.string(), nullptr, &err), err);
    std::shared_ptr<const gguf::file> f = gguf::file::open(path.string(), &err);
    REQUIRE_MESSAGE(f, err);
    CHECK(cuda_forward::create(f, 16, 8, &err) == nullptr);
    CHECK(err == "architecture " + std::string(a.name) + " not supported on cuda yet (run it with device=cpu)");
    fs::remove(path);
  }
  fs::remove_all(dir);
}

#else

TEST_CASE("cuda refuses the architectures it does not implement, by name") {
  test::skip("built without CUDA");
}

#endif
