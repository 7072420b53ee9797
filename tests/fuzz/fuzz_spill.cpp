// libFuzzer target: spill files are read back from disk (a crash, a bad disk, another
// process): the start-up index sweep and restore over a mutated file must never crash, use
// a file that fails its checks, or allocate beyond the file. Half the inputs mutate a windowed
// layout's file (kv_layout::window: blocks before the window lack their windowed layers).
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
kv_layout windowed_layout() {
  kv_layout l{3, 2, 4, 4};
  l.window = 5;
  l.layer_windowed.set(0);
  l.layer_windowed.set(1);
  return l;
}
const kv_layout k_layout_windowed = windowed_layout();

// One valid file (written by the store itself), the base every input mutates.
std::vector<uint8_t> valid_file(const std::string& dir, const kv_layout& layout, std::string* name) {
  block_pool pool(layout, 16);
  const int32_t s = pool.create_seq();
  std::vector<token_id> toks;
  for (int32_t i = 0; i < (layout.window > 0 ? 22 : 10); ++i) toks.push_back(5 + i);
  pool.reserve(s, int32_t(toks.size()));
  pool.set_n_tokens(s, int32_t(toks.size()));
  spill_store st(dir, "fuzz-digest", layout);
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
  // the two directories go at exit (unit.fuzz_replay runs this in every suite run)
  static const struct remover {
    std::string d;
    ~remover() {
      std::error_code ec;
      fs::remove_all(d, ec);
      fs::remove_all(d + "-w", ec);
    }
  } cleanup{dir};
  static std::string name, name_w;
  static const std::vector<uint8_t> base_plain = valid_file(dir, k_layout, &name);
  static const std::vector<uint8_t> base_w = valid_file(dir + "-w", k_layout_windowed, &name_w);
  const bool windowed = size > 0 && (data[size - 1] & 0x80) != 0;
  const kv_layout& layout = windowed ? k_layout_windowed : k_layout;
  const std::string& dir_used = windowed ? dir + "-w" : dir;
  const std::string& file_name = windowed ? name_w : name;
  const std::vector<uint8_t>& base = windowed ? base_w : base_plain;
  if (base.empty()) return 0;
  // NOTE: mutations of a valid file reach the checksum, size and header checks far sooner
  // than random bytes would find the magic; an odd-sized input also truncates the file.
  std::vector<uint8_t> file = base;
  for (size_t i = 0; i < size; ++i) file[i % file.size()] ^= data[i];
  if (size % 2 == 1 && size > 0) file.resize(size_t(data[0]) % file.size());
  {
    std::ofstream f(dir_used + "/" + file_name, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  }
  spill_store st(dir_used, "fuzz-digest", layout);
  block_pool pool(layout, 16);
  for (int i = 0; i < 4 && !st.entries().empty(); ++i) {  // a refused restore keeps its entry
    const int32_t s = pool.create_seq();
    // a prefix of the file too (windowed: refused where its window reaches the short blocks)
    st.restore(0, size > 2 ? 1 + int32_t(data[1]) % 24 : 1 << 20, pool, s);
    pool.sanity();
    pool.free_seq(s);
  }
  std::error_code ec;
  fs::remove(dir_used + "/" + file_name, ec);
  return 0;
}
