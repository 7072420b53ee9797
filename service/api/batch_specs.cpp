// The Batch input file's sidecar of mapped lines (batch_specs.h).
#include "api/batch_specs.h"

#include <cstring>
#include <filesystem>

#include "api/json_text.h"
#include "util/crypto.h"
#include "util/fnv1a.h"

namespace agentq::api {

namespace {

using json = nlohmann::json;

constexpr char k_magic[8] = {'A', 'Q', 'S', 'P', 'E', 'C', '1', '\n'};
constexpr size_t k_max_field = size_t(64) << 20;  // a longer length is damage (lines are at most a few MiB)

// Written into every sidecar this process makes; a sidecar without it is not used (batch_specs.h).
const std::string& process_nonce() {
  static const std::string nonce = [] {
    auto b = crypto::random_bytes(16);
    return std::string(b.begin(), b.end());
  }();
  return nonce;
}

void put_u32(std::string& b, uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& b, uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& b, std::string_view s) {
  put_u32(b, uint32_t(s.size()));
  b.append(s);
}

bool get(FILE* f, void* p, size_t n) { return n == 0 || std::fread(p, 1, n, f) == n; }
bool get_str(FILE* f, std::string& s) {
  uint32_t n = 0;
  if (!get(f, &n, 4) || n > k_max_field) return false;
  s.resize(n);
  return get(f, s.data(), n);
}

}  // namespace

std::string model_signature(const model_info& m) {
  return m.name + '\n' + m.arch + '\n' + std::to_string(m.n_ctx) + '\n' + (m.ready ? "1" : "0") + '\n' +
         m.chat_family + '\n' + m.source;
}

uint64_t line_hash(std::string_view line) { return util::fnv1a64(line); }

std::optional<mapped_line> map_for_sidecar(std::string_view line, const json& spec, const std::string& custom_id,
                                           bool store_content, const std::vector<model_info>& models) {
  if (!spec.is_object()) return std::nullopt;
  auto mit = spec.find("model");
  if (mit == spec.end() || !mit->is_string()) return std::nullopt;
  const model_info* mi = nullptr;
  for (const auto& m : models)
    if (m.name == mit->get_ref<const std::string&>()) mi = &m;
  if (!mi) return std::nullopt;
  mapped_line m;
  m.line_hash = line_hash(line);
  m.custom_id = custom_id;
  m.store_content = store_content;
  m.model = model_signature(*mi);
  // The text document_text(spec) would be once acceptance set spec["batch"] = {"id", "custom_id"}:
  // an object's members in key order (the document's map), "batch" among them, the id left out and
  // its place kept (the batch id is a plain ASCII string: it needs no escaping).
  std::string& text = m.request_json;
  text.reserve(512);
  json_writer w(text);
  bool first = true, placed = false;
  auto put_batch = [&] {
    if (!first) w.raw(",");
    first = false;
    w.key("batch");
    w.raw("{");
    w.key("custom_id");
    w.str(custom_id);
    w.raw(",");
    w.key("id");
    w.raw("\"");
    m.id_at = uint32_t(text.size());
    w.raw("\"}");
    placed = true;
  };
  w.raw("{");
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    if (!placed && it.key() > "batch") put_batch();
    if (it.key() == "batch") continue;  // acceptance's assignment replaces it
    if (!first) w.raw(",");
    first = false;
    w.str(it.key());
    w.raw(":");
    w.document(it.value());
  }
  if (!placed) put_batch();
  w.raw("}");
  if (text.size() > UINT32_MAX) return std::nullopt;
  return m;
}

std::string spliced_request(const mapped_line& m, std::string_view batch_id) {
  std::string out;
  out.reserve(m.request_json.size() + batch_id.size());
  out.append(m.request_json, 0, m.id_at);
  out.append(batch_id);
  out.append(m.request_json, m.id_at, std::string::npos);
  return out;
}

bool remove_batch_file(const std::string& files_dir, const std::string& rel) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove(fs::path(files_dir) / (rel + ".specs"), ec);
  return fs::remove(fs::path(files_dir) / rel, ec);
}

specs_writer::specs_writer(std::string path) : path_(std::move(path)) {
  f_ = std::fopen((path_ + ".part").c_str(), "wb");
  if (!f_) return;
  buf_.append(k_magic, sizeof k_magic);
  buf_.append(process_nonce());
}

specs_writer::~specs_writer() {
  if (f_) {
    std::fclose(f_);
    std::remove((path_ + ".part").c_str());
  }
}

void specs_writer::flush() {
  if (f_ && !buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
    std::fclose(f_);
    f_ = nullptr;
    std::remove((path_ + ".part").c_str());
  }
  buf_.clear();
}

std::string specs_writer::record(const std::optional<mapped_line>& m) {
  std::string r;
  if (!m) {
    r.push_back(0);
    return r;
  }
  r.reserve(m->request_json.size() + m->custom_id.size() + m->model.size() + 32);
  r.push_back(1);
  put_u64(r, m->line_hash);
  put_u32(r, m->id_at);
  r.push_back(m->store_content ? 1 : 0);
  put_str(r, m->custom_id);
  put_str(r, m->model);
  put_str(r, m->request_json);
  return r;
}

void specs_writer::append(std::string_view record) {
  if (!f_) return;
  buf_.append(record);
  if (buf_.size() >= (1u << 20)) flush();
}

bool specs_writer::commit() {
  flush();
  if (!f_) return false;
  // NOTE: no fsync: a sidecar lost or cut short by a crash only costs the acceptance its mapping.
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || std::rename((path_ + ".part").c_str(), path_.c_str()) != 0) {
    std::remove((path_ + ".part").c_str());
    return false;
  }
  return true;
}

std::unique_ptr<specs_reader> specs_reader::open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return nullptr;
  char head[sizeof k_magic + 16];
  const std::string& nonce = process_nonce();
  if (!get(f, head, sizeof head) || std::memcmp(head, k_magic, sizeof k_magic) != 0 ||
      std::memcmp(head + sizeof k_magic, nonce.data(), 16) != 0) {
    std::fclose(f);
    return nullptr;
  }
  return std::unique_ptr<specs_reader>(new specs_reader(f));
}

specs_reader::~specs_reader() {
  if (f_) std::fclose(f_);
}

std::optional<mapped_line> specs_reader::next() {
  if (broken_) return std::nullopt;
  char kind = 0;
  if (!get(f_, &kind, 1) || (kind != 0 && kind != 1)) {
    broken_ = true;
    return std::nullopt;
  }
  if (kind == 0) return std::nullopt;
  mapped_line m;
  char store = 0;
  if (!get(f_, &m.line_hash, 8) || !get(f_, &m.id_at, 4) || !get(f_, &store, 1) || !get_str(f_, m.custom_id) ||
      !get_str(f_, m.model) || !get_str(f_, m.request_json) || m.id_at > m.request_json.size()) {
    broken_ = true;
    return std::nullopt;
  }
  m.store_content = store != 0;
  return m;
}

}  // namespace agentq::api
