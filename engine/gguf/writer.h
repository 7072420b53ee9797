// GGUF v3 writer: metadata of every type (string and numeric arrays included), then
// tensor infos and tensor data aligned to 32 bytes, streamed to disk tensor by tensor.
// The counterpart of reader.h; used by agentq-mkgguf and tests to make model files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "gguf/types.h"

namespace agentq::gguf {

class writer {
 public:
  writer() = default;
  ~writer();
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

  // Metadata, in the order added. A repeated key or an empty key throws std::invalid_argument.
  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string_view v);
  void set_strings(std::string_view key, const std::vector<std::string_view>& v);
  // Numeric array: n elements of elem (a scalar type), packed little-endian at data.
  void set_array(std::string_view key, value_type elem, const void* data, uint64_t n);
  // Copy a value read by gguf::file (any type) under key.
  void set_value(std::string_view key, const value& v);

  // Declare a tensor; dims in ggml order (dims[0] is the row length). Returns its index.
  // Throws std::invalid_argument for a repeated name, an unknown type or a row length
  // that is not a multiple of the type's block size.
  size_t add_tensor(std::string_view name, tensor_type type, std::vector<int64_t> dims);
  size_t n_tensors() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t idx) const { return tensors_[idx].n_bytes; }
  uint64_t n_kv() const { return n_kv_; }

  // Create path and write header, metadata and tensor infos; false + *error on I/O failure.
  bool open(const std::string& path, std::string* error);
  // Write the next tensor's data (tensors in the order declared; n_bytes must equal
  // tensor_bytes). False + *error on I/O failure or a size mismatch.
  bool write_tensor_data(const void* data, uint64_t n_bytes, std::string* error);
  // Flush and close; false + *error if a tensor is missing or I/O failed.
  bool close(std::string* error);

 private:
  struct tensor_decl {
    std::string name;
    tensor_type type;
    std::vector<int64_t> dims;
    uint64_t n_bytes;
    uint64_t offset;   // from the start of the data section
  };
  void begin_kv(std::string_view key, value_type t);
  template <class T> void put(T v);
  void put_string(std::string_view s);
  bool write_bytes(const void* p, size_t n, std::string* error);
  bool pad_to(uint64_t alignment, std::string* error);

  static constexpr uint32_t alignment_ = 32;
  std::vector<uint8_t> kv_;             // serialized key/value pairs
  uint64_t n_kv_ = 0;
  std::set<std::string, std::less<>> keys_;
  std::vector<tensor_decl> tensors_;
  std::set<std::string, std::less<>> tensor_names_;
  uint64_t data_size_ = 0;
  std::FILE* f_ = nullptr;
  std::string path_;
  uint64_t pos_ = 0;                    // bytes written so far
  uint64_t data_start_ = 0;
  size_t next_tensor_ = 0;
};

}  // namespace agentq::gguf
