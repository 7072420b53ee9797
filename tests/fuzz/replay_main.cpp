// unit.fuzz_replay: every libFuzzer harness (tests/fuzz/fuzz_*.cpp, compiled here with its entry
// point renamed; fuzz_targets.inc lists them) run over its committed seed corpus and 300 inputs drawn
// from a fixed seed (random bytes, and seeds with bytes flipped, cut or repeated), in the normal and
// the sanitizer builds. scripts/fuzz.sh needs clang and is not part of the suite; this keeps every
// harness building and its invariants holding on known inputs (a harness aborts on a broken one).
//   test_fuzz_replay CORPUS_DIR
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#define X(fn, corpus) extern "C" int fn(const uint8_t* data, size_t size);
#include "fuzz_targets.inc"
#undef X

namespace fs = std::filesystem;

namespace {

struct target {
  const char* name;
  int (*fn)(const uint8_t*, size_t);
  const char* corpus;
};

const target k_targets[] = {
#define X(fn, corpus) {#fn, fn, corpus},
#include "fuzz_targets.inc"
#undef X
};

std::vector<std::string> seeds_of(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  // The harnesses load the tiny model and the GPT-2 vocabulary (and abort without them): without the
  // shared data this cannot check what it claims.
  const char* shared = std::getenv("AGENTQ_SHARED_DIR");
  const char* vocab = std::getenv("AGENTQ_FUZZ_VOCAB");
  const fs::path model = fs::path(shared && *shared ? shared : "../shared") / "models" / "stories260K.gguf";
  if (!fs::exists(model) || !vocab || !fs::exists(vocab)) {
    std::printf("skip: needs %s and $AGENTQ_FUZZ_VOCAB (the shared data)\n", model.c_str());
    return 77;
  }
  for (const target& t : k_targets) {
    const std::vector<std::string> seeds = seeds_of(fs::path(argv[1]) / t.corpus);
    std::printf("%s: %zu seeds", t.name, seeds.size());
    std::fflush(stdout);  // a harness that aborts leaves its name on the log
    for (const auto& s : seeds) t.fn(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    std::mt19937_64 rng(std::hash<std::string>{}(t.name));
    int n = 0;
    for (; n < 300; ++n) {
      std::string in;
      if (seeds.empty() || n % 3 == 0) {
        in.resize(rng() % 300);
        for (char& c : in) c = char(rng());
      } else {
        in = seeds[rng() % seeds.size()];
        switch (rng() % 3) {
          case 0:
            for (int k = 0; k < 4 && !in.empty(); ++k) in[rng() % in.size()] = char(rng());
            break;
          case 1: in.resize(rng() % (in.size() + 1)); break;
          default: in += in.substr(rng() % (in.size() + 1)); break;
        }
      }
      t.fn(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    }
    std::printf(", %d drawn inputs: ok\n", n);
  }
  return 0;
}
