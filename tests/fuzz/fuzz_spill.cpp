// libFuzzer target: spill files are read back from disk (a crash, a bad disk, another
// process): the start-up index sweep and restore over a mutated file must never crash, use
// a file that fails its checks, or allocate beyond the file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kv/spill.h"

namespace fs = std::filesystem;
using namespace agentq;

namespace {
const kv_layout k_layout{2, 2, 4, 4};

// One valid file (written by the store itself), the base every input mutates.
std::vector<uint8_t> valid_file(const std::string& dir, std::string* name) {
  block_pool pool(k_layout, 16);
  const int32_t s = pool.create_seq();
  pool.reserve(s, 10);
  pool.set_n_tokens(s, 10);
  std::vector<token_id> toks = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  spill_store st(dir, "fuzz-digest", k_layout);
  std::string path;
  spill_store::write_options o;
  o.job_key = 42;
  st.write(pool, s, toks, &path, o);
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  *name = fs::path(path).filename().string();
  fs::remove(path);
  return bytes;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = (fs::temp_directory_path() / ("agentq-fuzz-spill-" + std::to_string(::getpid()))).string();
  static std::string name;
  static const std::vector<uint8_t> base = valid_file(dir, &name);
  if (base.empty()) return 0;
  // NOTE: mutations of a valid file reach the checksum, size and header checks far sooner
  // than random bytes would find the magic; an odd-sized input also truncates the file.
  std::vector<uint8_t> file = base;
  for (size_t i = 0; i < size; ++i) file[i % file.size()] ^= data[i];
  if (size % 2 == 1 && size > 0) file.resize(size_t(data[0]) % file.size());
  {
    std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  }
  spill_store st(dir, "fuzz-digest", k_layout);
  block_pool pool(k_layout, 16);
  while (!st.entries().empty()) {
    const int32_t s = pool.create_seq();
    st.restore(0, 1 << 20, pool, s);
    pool.free_seq(s);
  }
  std::error_code ec;
  fs::remove(dir + "/" + name, ec);
  return 0;
}
