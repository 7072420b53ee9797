// GGUF v3 writer (see writer.h): serializes metadata eagerly, streams tensor data.
#include "gguf/writer.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace agentq::gguf {

writer::~writer() {
  if (f_) std::fclose(f_);
}

template <class T>
void writer::put(T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  kv_.insert(kv_.end(), b, b + sizeof(T));
}

void writer::put_string(std::string_view s) {
  put<uint64_t>(s.size());
  kv_.insert(kv_.end(), s.begin(), s.end());
}

void writer::begin_kv(std::string_view key, value_type t) {
  if (key.empty()) throw std::invalid_argument("gguf writer: empty metadata key");
  if (!keys_.emplace(key).second) throw std::invalid_argument("gguf writer: duplicate metadata key '" + std::string(key) + "'");
  if (f_) throw std::logic_error("gguf writer: metadata added after open()");
  put_string(key);
  put<uint32_t>(static_cast<uint32_t>(t));
  ++n_kv_;
}

void writer::set_u8(std::string_view k, uint8_t v) { begin_kv(k, value_type::u8); put(v); }
void writer::set_i8(std::string_view k, int8_t v) { begin_kv(k, value_type::i8); put(v); }
void writer::set_u16(std::string_view k, uint16_t v) { begin_kv(k, value_type::u16); put(v); }
void writer::set_i16(std::string_view k, int16_t v) { begin_kv(k, value_type::i16); put(v); }
void writer::set_u32(std::string_view k, uint32_t v) { begin_kv(k, value_type::u32); put(v); }
void writer::set_i32(std::string_view k, int32_t v) { begin_kv(k, value_type::i32); put(v); }
void writer::set_u64(std::string_view k, uint64_t v) { begin_kv(k, value_type::u64); put(v); }
void writer::set_i64(std::string_view k, int64_t v) { begin_kv(k, value_type::i64); put(v); }
void writer::set_f32(std::string_view k, float v) { begin_kv(k, value_type::f32); put(v); }
void writer::set_f64(std::string_view k, double v) { begin_kv(k, value_type::f64); put(v); }
void writer::set_bool(std::string_view k, bool v) { begin_kv(k, value_type::boolean); put<uint8_t>(v ? 1 : 0); }
void writer::set_string(std::string_view k, std::string_view v) { begin_kv(k, value_type::string); put_string(v); }

void writer::set_strings(std::string_view k, const std::vector<std::string_view>& v) {
  begin_kv(k, value_type::array);
  put<uint32_t>(static_cast<uint32_t>(value_type::string));
  put<uint64_t>(v.size());
  for (auto s : v) put_string(s);
}

void writer::set_array(std::string_view k, value_type elem, const void* data, uint64_t n) {
  const size_t es = scalar_size(elem);
  if (!es) throw std::invalid_argument("gguf writer: array of non-scalar type for '" + std::string(k) + "'");
  begin_kv(k, value_type::array);
  put<uint32_t>(static_cast<uint32_t>(elem));
  put<uint64_t>(n);
  auto p = static_cast<const uint8_t*>(data);
  kv_.insert(kv_.end(), p, p + n * es);
}

void writer::set_value(std::string_view k, const value& v) {
  switch (v.type) {
    case value_type::u8: set_u8(k, static_cast<uint8_t>(v.u)); return;
    case value_type::i8: set_i8(k, static_cast<int8_t>(v.i)); return;
    case value_type::u16: set_u16(k, static_cast<uint16_t>(v.u)); return;
    case value_type::i16: set_i16(k, static_cast<int16_t>(v.i)); return;
    case value_type::u32: set_u32(k, static_cast<uint32_t>(v.u)); return;
    case value_type::i32: set_i32(k, static_cast<int32_t>(v.i)); return;
    case value_type::u64: set_u64(k, v.u); return;
    case value_type::i64: set_i64(k, v.i); return;
    case value_type::f32: set_f32(k, static_cast<float>(v.f)); return;
    case value_type::f64: set_f64(k, v.f); return;
    case value_type::boolean: set_bool(k, v.i != 0); return;
    case value_type::string: set_string(k, v.str); return;
    case value_type::array:
      if (v.elem_type == value_type::string) {
        set_strings(k, v.strs);
      } else {
        set_array(k, v.elem_type, v.raw, v.n);
      }
      return;
  }
  throw std::invalid_argument("gguf writer: unknown value type for '" + std::string(k) + "'");
}

size_t writer::add_tensor(std::string_view name, tensor_type type, std::vector<int64_t> dims) {
  if (f_) throw std::logic_error("gguf writer: tensor added after open()");
  const type_traits tt = traits_of(type);
  if (!tt.name) throw std::invalid_argument("gguf writer: unknown tensor type for '" + std::string(name) + "'");
  if (dims.empty() || dims.size() > 4) throw std::invalid_argument("gguf writer: tensor '" + std::string(name) + "' needs 1..4 dims");
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) throw std::invalid_argument("gguf writer: tensor '" + std::string(name) + "' has a dim <= 0");
    n *= static_cast<uint64_t>(d);
  }
  if (dims[0] % tt.block_size != 0)
    throw std::invalid_argument("gguf writer: tensor '" + std::string(name) + "' row length " + std::to_string(dims[0]) +
                                " is not a multiple of the " + tt.name + " block size");
  if (!tensor_names_.emplace(name).second) throw std::invalid_argument("gguf writer: duplicate tensor '" + std::string(name) + "'");
  tensor_decl t{std::string(name), type, std::move(dims), n / static_cast<uint64_t>(tt.block_size) * static_cast<uint64_t>(tt.type_size), 0};
  t.offset = (data_size_ + alignment_ - 1) / alignment_ * alignment_;
  data_size_ = t.offset + t.n_bytes;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

bool writer::write_bytes(const void* p, size_t n, std::string* error) {
  if (n && std::fwrite(p, 1, n, f_) != n) {
    *error = "write to " + path_ + " failed: " + std::strerror(errno);
    return false;
  }
  pos_ += n;
  return true;
}

bool writer::pad_to(uint64_t a, std::string* error) {
  static const uint8_t zeros[64] = {};
  const uint64_t target = (pos_ + a - 1) / a * a;
  return write_bytes(zeros, static_cast<size_t>(target - pos_), error);
}

bool writer::open(const std::string& path, std::string* error) {
  if (f_) throw std::logic_error("gguf writer: open() twice");
  path_ = path;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) {
    *error = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  std::setvbuf(f_, nullptr, _IOFBF, 4u << 20);
  std::vector<uint8_t> head;
  auto put_h = [&head](const void* p, size_t n) {
    auto b = static_cast<const uint8_t*>(p);
    head.insert(head.end(), b, b + n);
  };
  const uint32_t magic = 0x46554747;  // "GGUF"
  const uint32_t version = 3;
  const uint64_t n_tensors = tensors_.size();
  put_h(&magic, 4);
  put_h(&version, 4);
  put_h(&n_tensors, 8);
  put_h(&n_kv_, 8);
  head.insert(head.end(), kv_.begin(), kv_.end());
  for (const auto& t : tensors_) {
    const uint64_t len = t.name.size();
    put_h(&len, 8);
    put_h(t.name.data(), t.name.size());
    const uint32_t n_dims = static_cast<uint32_t>(t.dims.size());
    put_h(&n_dims, 4);
    for (int64_t d : t.dims) {
      const uint64_t u = static_cast<uint64_t>(d);
      put_h(&u, 8);
    }
    const uint32_t type = static_cast<uint32_t>(t.type);
    put_h(&type, 4);
    put_h(&t.offset, 8);
  }
  if (!write_bytes(head.data(), head.size(), error) || !pad_to(alignment_, error)) return false;
  data_start_ = pos_;
  return true;
}

bool writer::write_tensor_data(const void* data, uint64_t n_bytes, std::string* error) {
  if (!f_) throw std::logic_error("gguf writer: write_tensor_data() before open()");
  if (next_tensor_ >= tensors_.size()) {
    *error = "more tensor data than declared tensors";
    return false;
  }
  const tensor_decl& t = tensors_[next_tensor_];
  if (n_bytes != t.n_bytes) {
    *error = "tensor '" + t.name + "': got " + std::to_string(n_bytes) + " bytes, expected " + std::to_string(t.n_bytes);
    return false;
  }
  if (!pad_to(alignment_, error)) return false;
  if (pos_ - data_start_ != t.offset) {
    *error = "internal: tensor '" + t.name + "' offset mismatch";
    return false;
  }
  if (!write_bytes(data, static_cast<size_t>(n_bytes), error)) return false;
  ++next_tensor_;
  return true;
}

bool writer::close(std::string* error) {
  if (!f_) throw std::logic_error("gguf writer: close() before open()");
  bool ok = true;
  if (next_tensor_ != tensors_.size()) {
    *error = "only " + std::to_string(next_tensor_) + " of " + std::to_string(tensors_.size()) + " tensors written";
    ok = false;
  }
  // Pad the file so the last tensor's aligned extent lies inside it, as ggml does.
  if (ok) ok = pad_to(alignment_, error);
  if (std::fclose(f_) != 0 && ok) {
    *error = "closing " + path_ + " failed: " + std::strerror(errno);
    ok = false;
  }
  f_ = nullptr;
  return ok;
}

}  // namespace agentq::gguf
