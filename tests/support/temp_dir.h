// A temporary directory for one test, removed with everything in it on destruction.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace agentq::test {

class temp_dir {
 public:
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "agentq-test-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (!p) std::abort();
    path_ = p;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace agentq::test
