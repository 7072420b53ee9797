// GGUF v2/v3 reader over a read-only mmap (or a caller's buffer, for fuzzing).
// Every count, size, offset and dimension is bounds- and overflow-checked:
// a corrupt or hostile file yields an error naming what is wrong, never a
// crash or an allocation larger than the file itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/types.h"

namespace agentq::gguf {

enum class value_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* name_of(value_type t);
// Bytes of one scalar of type t as stored in GGUF; 0 for string and array.
size_t scalar_size(value_type t);

// One metadata value. Scalars are widened; strings and string arrays point into
// the mapped file; numeric arrays keep their raw bytes (read with at_i64/at_f64).
struct value {
  value_type type = value_type::u8;
  value_type elem_type = value_type::u8;   // for arrays
  int64_t i = 0;                           // integer and bool scalars
  uint64_t u = 0;                          // unsigned scalars (also mirrored into i when it fits)
  double f = 0;                            // float scalars
  std::string_view str;                    // string scalar
  std::vector<std::string_view> strs;      // string arrays
  const uint8_t* raw = nullptr;            // numeric arrays: packed little-endian elements
  uint64_t n = 0;                          // array length

  bool is_array() const { return type == value_type::array; }
  bool is_integer() const;
  bool is_number() const;
  int64_t at_i64(uint64_t idx) const;      // numeric arrays only; idx < n
  double at_f64(uint64_t idx) const;
};

struct tensor_info {
  std::string name;
  tensor_type type = tensor_type::f32;
  std::vector<int64_t> dims;               // ggml order: dims[0] is the contiguous (row) length
  uint64_t offset = 0;                     // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;           // into the mapping
};

class file {
 public:
  // Open and validate a GGUF file; nullptr with *error set on failure. A split model
  // (split.count > 1, files named <prefix>-00001-of-0000N.gguf) opens from its first file:
  // the other shards are mapped and validated too, and tensors() lists every shard's tensors.
  static std::unique_ptr<file> open(const std::string& path, std::string* error);
  // Parse an in-memory image (not copied; must outlive the result).
  static std::unique_ptr<file> parse(const uint8_t* data, size_t size, std::string* error);
  // Header only: metadata and the tensor table, read with pread in growing chunks
  // up to max_bytes; the tensor data is never mapped or read (tensor_info::data is null), nor
  // are a split model's other files. Tensor extents are still checked against the file's size.
  static std::unique_ptr<file> open_header(const std::string& path, std::string* error,
                                           uint64_t max_bytes = k_max_header_bytes);
  // Header bytes as open_header() read them (header_bytes() long; copied), e.g. from another host.
  static std::unique_ptr<file> parse_header(std::string_view bytes, std::string* error);
  static constexpr uint64_t k_max_header_bytes = 256ull << 20;
  ~file();
  file(const file&) = delete;
  file& operator=(const file&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // of the first file only, for a split model
  // Number of files the model spans (1 unless split).
  size_t n_files() const { return 1 + shards_.size(); }

  const std::vector<std::pair<std::string, value>>& metadata() const { return kv_; }
  const value* find(std::string_view key) const;
  // Typed lookups: nullopt when the key is missing or has another type.
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;       // any integer type
  std::optional<double> get_float(std::string_view key) const;      // any numeric type
  std::optional<bool> get_bool(std::string_view key) const;

  // Bytes of the header: magic through the tensor table (the tensor data starts after padding).
  uint64_t header_bytes() const { return header_bytes_; }
  // open_header / parse_header: the header's own bytes (header_bytes() long); else empty.
  std::string_view header_data() const { return std::string_view(owned_).substr(0, header_bytes_); }

  const std::vector<tensor_info>& tensors() const { return tensors_; }
  const tensor_info* find_tensor(std::string_view name) const;

 private:
  file() = default;
  void parse_all();
  static std::unique_ptr<file> open_one(const std::string& path, std::string* error);
  bool open_shards(std::string* error);

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  // Header-only reads: n_avail_ bytes at base_ (owned_), checks against n_limit_; 0 = size_.
  bool header_only_ = false;
  uint64_t n_avail_ = 0, n_limit_ = 0;
  uint64_t header_bytes_ = 0;
  std::string owned_;
  void* map_ = nullptr;                    // non-null when we own an mmap
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<std::unique_ptr<file>> shards_;  // files 2..N of a split model
};

}  // namespace agentq::gguf
