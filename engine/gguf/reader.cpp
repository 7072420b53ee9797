// GGUF reader: a bounds-checked cursor over the mapped bytes. Parse errors are
// thrown as parse_error inside and turned into a message at open()/parse().
#include "gguf/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace agentq::gguf {
namespace {

constexpr uint32_t k_magic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t k_max_dims = 4;
constexpr uint64_t k_max_string = 1ull << 30;

struct parse_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Header-only reads (header.cpp): the bytes read so far end before `needed`; read more and parse again.
struct need_more {
  uint64_t needed;
};

// NOTE: n_avail bytes are in memory, n_limit is the size the checks see (the file's, or the header
// cap): past n_avail but within n_limit is "read more" (need_more), past n_limit a truncated file.
class cursor {
 public:
  cursor(const uint8_t* p, uint64_t n_avail, uint64_t n_limit) : base_(p), n_avail_(n_avail), n_(n_limit) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > remaining()) {
      throw parse_error(std::string("truncated file: ") + what + " needs " + std::to_string(n) +
                        " bytes at offset " + std::to_string(pos_) + ", " +
                        std::to_string(remaining()) + " left");
    }
    if (n > n_avail_ - pos_) throw need_more{pos_ + n};
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string_view read_string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    if (len > k_max_string) throw parse_error(std::string(what) + ": string length " + std::to_string(len) + " is implausible");
    const uint8_t* p = take(len, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(len)};
  }

 private:
  const uint8_t* base_;
  uint64_t n_avail_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

value read_value(cursor& c, value_type t, const std::string& key, bool in_array);

void read_scalar(cursor& c, value& v, const std::string& key) {
  const char* what = "metadata value";
  switch (v.type) {
    case value_type::u8: v.u = c.read<uint8_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case value_type::i8: v.i = c.read<int8_t>(what); break;
    case value_type::u16: v.u = c.read<uint16_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case value_type::i16: v.i = c.read<int16_t>(what); break;
    case value_type::u32: v.u = c.read<uint32_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case value_type::i32: v.i = c.read<int32_t>(what); break;
    case value_type::u64: v.u = c.read<uint64_t>(what); v.i = static_cast<int64_t>(v.u); break;
    case value_type::i64: v.i = c.read<int64_t>(what); break;
    case value_type::f32: v.f = c.read<float>(what); break;
    case value_type::f64: v.f = c.read<double>(what); break;
    case value_type::boolean: {
      uint8_t b = c.read<uint8_t>(what);
      if (b > 1) throw parse_error("metadata '" + key + "': bool value " + std::to_string(b));
      v.i = b;
      break;
    }
    default: throw parse_error("metadata '" + key + "': not a scalar type");
  }
  if (v.type == value_type::f32 || v.type == value_type::f64) v.i = static_cast<int64_t>(v.f);
}

value read_value(cursor& c, value_type t, const std::string& key, bool in_array) {
  value v;
  v.type = t;
  if (t == value_type::string) {
    v.str = c.read_string(("metadata '" + key + "' string").c_str());
  } else if (t == value_type::array) {
    if (in_array) throw parse_error("metadata '" + key + "': nested arrays are not supported");
    uint32_t et = c.read<uint32_t>("array element type");
    if (et > static_cast<uint32_t>(value_type::f64))
      throw parse_error("metadata '" + key + "': unknown array element type " + std::to_string(et));
    v.elem_type = static_cast<value_type>(et);
    if (v.elem_type == value_type::array)
      throw parse_error("metadata '" + key + "': nested arrays are not supported");
    v.n = c.read<uint64_t>("array length");
    if (v.elem_type == value_type::string) {
      // Each string takes at least its 8-byte length: bounds the reservation by the file size.
      if (v.n > c.remaining() / 8)
        throw parse_error("metadata '" + key + "': array of " + std::to_string(v.n) + " strings exceeds the file");
      v.strs.reserve(v.n);
      for (uint64_t i = 0; i < v.n; ++i) v.strs.push_back(c.read_string(("metadata '" + key + "' element").c_str()));
    } else {
      size_t es = scalar_size(v.elem_type);
      if (v.n > c.remaining() / es)
        throw parse_error("metadata '" + key + "': array of " + std::to_string(v.n) + " elements exceeds the file");
      v.raw = c.take(v.n * es, "array data");
    }
  } else if (static_cast<uint32_t>(t) <= static_cast<uint32_t>(value_type::f64)) {
    read_scalar(c, v, key);
  } else {
    throw parse_error("metadata '" + key + "': unknown value type " + std::to_string(static_cast<uint32_t>(t)));
  }
  return v;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

size_t scalar_size(value_type t) {
  switch (t) {
    case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
    case value_type::u16: case value_type::i16: return 2;
    case value_type::u32: case value_type::i32: case value_type::f32: return 4;
    case value_type::u64: case value_type::i64: case value_type::f64: return 8;
    default: return 0;
  }
}

const char* name_of(value_type t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

bool value::is_integer() const {
  switch (type) {
    case value_type::u8: case value_type::i8: case value_type::u16: case value_type::i16:
    case value_type::u32: case value_type::i32: case value_type::u64: case value_type::i64:
      return true;
    default: return false;
  }
}
bool value::is_number() const { return is_integer() || type == value_type::f32 || type == value_type::f64; }

int64_t value::at_i64(uint64_t idx) const {
  if (!raw || idx >= n) return 0;
  const uint8_t* p = raw + idx * scalar_size(elem_type);
  switch (elem_type) {
    case value_type::u8: case value_type::boolean: return *p;
    case value_type::i8: return static_cast<int8_t>(*p);
    case value_type::u16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case value_type::i16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case value_type::u32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case value_type::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case value_type::u64: { uint64_t x; std::memcpy(&x, p, 8); return static_cast<int64_t>(x); }
    case value_type::i64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    case value_type::f32: { float x; std::memcpy(&x, p, 4); return static_cast<int64_t>(x); }
    case value_type::f64: { double x; std::memcpy(&x, p, 8); return static_cast<int64_t>(x); }
    default: return 0;
  }
}

double value::at_f64(uint64_t idx) const {
  if (!raw || idx >= n) return 0;
  const uint8_t* p = raw + idx * scalar_size(elem_type);
  if (elem_type == value_type::f32) { float x; std::memcpy(&x, p, 4); return x; }
  if (elem_type == value_type::f64) { double x; std::memcpy(&x, p, 8); return x; }
  return static_cast<double>(at_i64(idx));
}

file::~file() {
  if (map_) munmap(map_, size_);
}

std::unique_ptr<file> file::open_one(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = "cannot open model file '" + path + "': " + std::strerror(errno);
    return nullptr;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (error) *error = "'" + path + "' is not a regular file";
    return nullptr;
  }
  if (st.st_size == 0) {
    ::close(fd);
    if (error) *error = "'" + path + "' is empty, not a GGUF file";
    return nullptr;
  }
  void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    if (error) *error = "cannot map '" + path + "': " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<file> f(new file());
  f->path_ = path;
  f->map_ = m;
  f->base_ = static_cast<const uint8_t*>(m);
  f->size_ = static_cast<uint64_t>(st.st_size);
  try {
    f->parse_all();
  } catch (const parse_error& e) {
    if (error) *error = "invalid GGUF file '" + path + "': " + e.what();
    return nullptr;
  }
  return f;
}

std::unique_ptr<file> file::parse(const uint8_t* data, size_t size, std::string* error) {
  std::unique_ptr<file> f(new file());
  f->path_ = "<memory>";
  f->base_ = data;
  f->size_ = size;
  try {
    f->parse_all();
  } catch (const parse_error& e) {
    if (error) *error = std::string("invalid GGUF data: ") + e.what();
    return nullptr;
  }
  return f;
}

std::unique_ptr<file> file::open_header(const std::string& path, std::string* error, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = "cannot open model file '" + path + "': " + std::strerror(errno);
    return nullptr;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    if (error) *error = "'" + path + "' is " + (st.st_size == 0 ? "empty, not a GGUF file" : "not a regular file");
    return nullptr;
  }
  std::unique_ptr<file> f(new file());
  f->path_ = path;
  f->header_only_ = true;
  f->size_ = static_cast<uint64_t>(st.st_size);
  // NOTE: the checks see min(file, cap) bytes, so a hostile count cannot reserve more than the cap.
  f->n_limit_ = std::min<uint64_t>(f->size_, max_bytes);
  uint64_t want = std::min<uint64_t>(f->n_limit_, 1 << 20);
  std::string fail;
  for (;;) {
    f->owned_.resize(want);
    while (f->n_avail_ < want) {
      ssize_t n = ::pread(fd, f->owned_.data() + f->n_avail_, want - f->n_avail_, off_t(f->n_avail_));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        fail = "cannot read '" + path + "': " + (n < 0 ? std::strerror(errno) : "unexpected end of file");
        break;
      }
      f->n_avail_ += uint64_t(n);
    }
    if (!fail.empty()) break;
    f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
    try {
      f->parse_all();
      break;
    } catch (const need_more& m) {
      want = std::min(f->n_limit_, std::max(m.needed, want * 2));
    } catch (const parse_error& e) {
      fail = "invalid GGUF file '" + path + "': " + e.what();
      if (f->n_limit_ < f->size_) fail += " (the header may not exceed " + std::to_string(max_bytes >> 20) + " MiB)";
      break;
    }
  }
  ::close(fd);
  if (!fail.empty()) {
    if (error) *error = fail;
    return nullptr;
  }
  // Keep the header's own bytes only (the last chunk read may reach into the tensor data).
  f->owned_.resize(f->header_bytes_);
  f->owned_.shrink_to_fit();
  f->n_avail_ = f->n_limit_ = f->owned_.size();
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->size_ = 0;
  f->parse_all();  // NOTE: string views now point into the trimmed copy
  return f;
}

std::unique_ptr<file> file::parse_header(std::string_view bytes, std::string* error) {
  std::unique_ptr<file> f(new file());
  f->path_ = "<header>";
  f->header_only_ = true;
  f->owned_.assign(bytes);
  f->base_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->n_avail_ = f->n_limit_ = f->owned_.size();
  f->size_ = 0;  // no data section to check
  try {
    if (f->owned_.empty()) throw parse_error("empty header");
    f->parse_all();
  } catch (const parse_error& e) {
    if (error) *error = std::string("invalid GGUF header: ") + e.what();
    return nullptr;
  } catch (const need_more&) {
    if (error) *error = "invalid GGUF header: truncated";
    return nullptr;
  }
  return f;
}

void file::parse_all() {
  kv_.clear();
  kv_index_.clear();
  tensors_.clear();
  tensor_index_.clear();
  cursor c(base_, n_avail_ ? n_avail_ : size_, n_limit_ ? n_limit_ : size_);
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != k_magic) throw parse_error("bad magic (not a GGUF file)");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    throw parse_error("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A key/value needs >= 12 bytes and a tensor info >= 24: reject counts the file cannot hold.
  if (n_kv > c.remaining() / 12) throw parse_error("metadata count " + std::to_string(n_kv) + " exceeds the file");
  if (n_tensors > c.remaining() / 24) throw parse_error("tensor count " + std::to_string(n_tensors) + " exceeds the file");

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(c.read_string("metadata key"));
    uint32_t t = c.read<uint32_t>("metadata type");
    value v = read_value(c, static_cast<value_type>(t), key, false);
    if (kv_index_.count(key)) throw parse_error("duplicate metadata key '" + key + "'");
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const value* a = find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > (1 << 16) || (a->i & (a->i - 1)) != 0)
      throw parse_error("general.alignment must be a power of two up to 65536");
    alignment_ = static_cast<uint32_t>(a->i);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    tensor_info t;
    t.name = std::string(c.read_string("tensor name"));
    uint32_t n_dims = c.read<uint32_t>("tensor dims");
    if (n_dims == 0 || n_dims > k_max_dims)
      throw parse_error("tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (1..4 allowed)");
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = c.read<uint64_t>("tensor dim");
      if (dim == 0 || dim > (1ull << 40)) throw parse_error("tensor '" + t.name + "': dimension " + std::to_string(dim) + " out of range");
      if (mul_overflows(n_el, dim, &n_el)) throw parse_error("tensor '" + t.name + "': element count overflows");
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    uint32_t type_id = c.read<uint32_t>("tensor type");
    type_traits tr = traits_of(type_id);
    if (!tr.name) throw parse_error("tensor '" + t.name + "': unknown tensor type id " + std::to_string(type_id));
    t.type = static_cast<tensor_type>(type_id);
    if (t.dims[0] % tr.block_size != 0)
      throw parse_error("tensor '" + t.name + "': row length " + std::to_string(t.dims[0]) + " is not a multiple of " +
                        tr.name + "'s block size " + std::to_string(tr.block_size));
    t.n_elements = n_el;
    if (mul_overflows(n_el / tr.block_size, static_cast<uint64_t>(tr.type_size), &t.n_bytes))
      throw parse_error("tensor '" + t.name + "': byte size overflows");
    t.offset = c.read<uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0) throw parse_error("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " is not aligned");
    if (tensor_index_.count(t.name)) throw parse_error("duplicate tensor '" + t.name + "'");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  header_bytes_ = c.pos();
  // NOTE: a header read from bytes alone (parse_header), or a header-only file (agentq-engine
  // header: it ends where the tensor data would start), has no data section to check against.
  if (header_only_ && (size_ == 0 || size_ == c.pos())) return;
  if (data_start > size_ && !tensors_.empty()) throw parse_error("data section starts past the end of the file");
  uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      throw parse_error("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                        ") lies outside the data section (" + std::to_string(data_size) + " bytes; truncated file?)");
    }
    t.data = header_only_ ? nullptr : base_ + data_start + t.offset;
  }
}

const value* file::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<std::string_view> file::get_string(std::string_view key) const {
  const value* v = find(key);
  if (!v || v->type != value_type::string) return std::nullopt;
  return v->str;
}

std::optional<int64_t> file::get_int(std::string_view key) const {
  const value* v = find(key);
  if (!v || !v->is_integer()) return std::nullopt;
  return v->i;
}

std::optional<double> file::get_float(std::string_view key) const {
  const value* v = find(key);
  if (!v || !v->is_number()) return std::nullopt;
  return (v->type == value_type::f32 || v->type == value_type::f64) ? v->f : static_cast<double>(v->i);
}

std::optional<bool> file::get_bool(std::string_view key) const {
  const value* v = find(key);
  if (!v || v->type != value_type::boolean) return std::nullopt;
  return v->i != 0;
}

const tensor_info* file::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace agentq::gguf
