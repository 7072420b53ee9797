// Paths every test needs: the shared data dir, the built binaries, the source tree.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace agentq::test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
// ../shared beside the checkout (read-only models, golden outputs, templates).
inline std::filesystem::path shared_dir() { return env_or("AGENTQ_SHARED_DIR", "../shared"); }
inline std::filesystem::path tiny_model() { return shared_dir() / "models" / "stories260K.gguf"; }
inline std::filesystem::path bin_dir() { return env_or("AGENTQ_BIN_DIR", "build/bin"); }
inline std::filesystem::path source_dir() { return env_or("AGENTQ_SOURCE_DIR", "."); }

// A test that cannot check what it claims says why and exits 77 (ctest: skipped); it never passes.
[[noreturn]] inline void skip(const std::string& why) {
  std::fprintf(stderr, "skipped: %s\n", why.c_str());
  std::fflush(stderr);
  std::exit(77);
}
inline void require_tiny_model() {
  if (!std::filesystem::exists(tiny_model())) skip(tiny_model().string() + " missing (the shared data beside the checkout)");
}

}  // namespace agentq::test
