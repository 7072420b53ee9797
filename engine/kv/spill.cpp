// Spill tier: write / index / verify / restore K/V files.
#include "kv/spill.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kv/prefix_cache.h"

namespace agentq {

namespace fs = std::filesystem;

namespace {
constexpr char magic[8] = {'A', 'Q', 'K', 'V', 'S', 'P', 'L', '1'};

struct header {
  char magic[8];
  uint32_t version;
  // kv_dtype | head_major << 8. NOTE: was padding (always 0: f32, token-major) in files written
  // before these existed, which is what such a file holds.
  uint32_t format;
  uint64_t digest_hash;
  int32_t n_layer, n_head_kv, head_dim, block_size;
  int32_t n_tokens;
  int32_t n_blocks;
  // version 2 (version 1 files end the header here):
  uint64_t job_key;   // the job whose KV this is (erase_job, prune)
  double resume_at;   // wall clock the job was expected to resume (budget eviction order)
};
constexpr uint32_t k_version = 2;
constexpr size_t k_header_v1 = offsetof(header, job_key);
static_assert(k_header_v1 == 48 && sizeof(header) == 64);
size_t header_bytes(uint32_t version) { return version == 1 ? k_header_v1 : sizeof(header); }

// NOTE: bit 9: windowed KV (the payload leaves out the windowed layers of blocks before the
// window: see spill_store::write); a file of the other kind is not restored.
uint32_t format_of(const kv_layout& l) {
  return uint32_t(l.dtype) | (l.head_major ? 1u << 8 : 0u) | (l.window > 0 ? 1u << 9 : 0u);
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool read_all(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  f.seekg(0, std::ios::end);
  const auto n = f.tellg();
  if (n < 0) return false;
  f.seekg(0);
  out->resize(size_t(n));
  return bool(f.read(reinterpret_cast<char*>(out->data()), n));
}

// Parse and check a header against the store's digest and layout; tokens too when present.
bool parse_header(const std::vector<uint8_t>& buf, uint64_t digest_hash, const kv_layout& lay, header* h,
                  std::vector<token_id>* tokens) {
  if (buf.size() < k_header_v1) return false;
  *h = header{};
  std::memcpy(h, buf.data(), k_header_v1);
  if (std::memcmp(h->magic, magic, 8) != 0 || (h->version != 1 && h->version != k_version)) return false;
  const size_t hb = header_bytes(h->version);
  if (buf.size() < hb) return false;
  std::memcpy(h, buf.data(), hb);
  if (h->digest_hash != digest_hash) return false;
  if (h->n_layer != lay.n_layer || h->n_head_kv != lay.n_head_kv || h->head_dim != lay.head_dim ||
      h->block_size != lay.block_size || h->format != format_of(lay))
    return false;
  if (h->n_tokens <= 0 || h->n_blocks != (h->n_tokens + lay.block_size - 1) / lay.block_size) return false;
  const size_t tok_bytes = size_t(h->n_tokens) * sizeof(token_id);
  if (buf.size() < hb + tok_bytes) return false;
  tokens->resize(size_t(h->n_tokens));
  std::memcpy(tokens->data(), buf.data() + hb, tok_bytes);
  return true;
}

// write(2) all of it; false on an error.
bool write_fd(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// A temp file "<name>.kv.tmp.<pid>" whose writer is gone (crashed mid-write). The older
// "<name>.kv.tmp" form has no pid: gone by definition once nobody renames it.
bool orphan_temp(const std::string& name) {
  const size_t p = name.find(".kv.tmp");
  if (p == std::string::npos) return false;
  const std::string rest = name.substr(p + 7);
  if (rest.empty()) return true;
  if (rest[0] != '.') return false;
  char* end = nullptr;
  const long pid = std::strtol(rest.c_str() + 1, &end, 10);
  if (pid <= 0 || *end != '\0') return false;
  return pid != long(::getpid()) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}
}  // namespace

double wall_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t checksum64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h ^= w;
    h *= 0x100000001b3ull;
    h ^= h >> 29;  // NOTE: word-wise FNV alone mixes high bits poorly; this spreads them
  }
  for (; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

spill_store::spill_store(std::string dir, const std::string& model_digest, kv_layout layout, int64_t budget_bytes)
    : dir_(std::move(dir)), layout_(layout), budget_bytes_(std::max<int64_t>(0, budget_bytes)) {
  digest_hash_ = checksum64(model_digest.data(), model_digest.size());
  prefix_ = hex16(digest_hash_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  rebuild_index();
}

int64_t spill_store::file_bytes(int32_t n_tokens) const {
  return int64_t(sizeof(header)) + int64_t(n_tokens) * int64_t(sizeof(token_id)) + layout_.seq_bytes(n_tokens) +
         int64_t(sizeof(uint64_t));
}

void spill_store::rebuild_index() {
  entries_.clear();
  std::error_code ec;
  std::vector<fs::path> torn;
  for (const auto& de : fs::directory_iterator(dir_, ec)) {
    const std::string name = de.path().filename().string();
    if (name.rfind(prefix_, 0) != 0) continue;
    if (orphan_temp(name)) {  // a crash mid-write: never renamed into place
      torn.push_back(de.path());
      ++n_orphans_removed_;
      continue;
    }
    if (de.path().extension() != ".kv") continue;
    std::vector<uint8_t> buf;
    // NOTE: reads only the header and tokens (and checks the size); the checksum over the
    // payload is verified on restore, when the data is about to be used.
    std::ifstream f(de.path(), std::ios::binary);
    buf.resize(sizeof(header));
    f.read(reinterpret_cast<char*>(buf.data()), sizeof(header));
    buf.resize(size_t(f.gcount()));
    if (buf.size() < k_header_v1) continue;
    header h;
    std::memcpy(&h, buf.data(), k_header_v1);
    if (h.n_tokens <= 0 || h.n_tokens > (1 << 26)) continue;
    const size_t hb = header_bytes(h.version);
    const uint64_t on_disk = fs::file_size(de.path(), ec);
    if (ec || buf.size() < hb || hb + uint64_t(h.n_tokens) * sizeof(token_id) > on_disk) continue;  // never past the file
    buf.resize(hb + size_t(h.n_tokens) * sizeof(token_id));
    f.clear();
    f.seekg(std::streamoff(hb));
    if (!f.read(reinterpret_cast<char*>(buf.data() + hb), std::streamsize(buf.size() - hb))) continue;
    entry e;
    if (!parse_header(buf, digest_hash_, layout_, &h, &e.tokens)) continue;
    e.path = de.path().string();
    e.job_key = h.job_key;
    e.resume_at = h.resume_at;
    e.n_bytes = int64_t(on_disk);
    const int64_t want = file_bytes(h.n_tokens) - int64_t(sizeof(header)) + int64_t(hb);
    if (e.n_bytes != want) {  // torn (a write cut short): counted like a checksum failure
      torn.push_back(de.path());
      ++n_corrupt_;
      continue;
    }
    entries_.push_back(std::move(e));
  }
  for (const auto& p : torn) fs::remove(p, ec);
  std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) { return a.path < b.path; });
}

bool spill_store::make_room(int64_t n_bytes, double resume_at, uint64_t job_key) {
  if (budget_bytes_ <= 0) return true;
  if (n_bytes > budget_bytes_) return false;
  auto replaced = [&](const entry& e) { return job_key != 0 && e.job_key == job_key; };
  int64_t used = 0;
  for (const auto& e : entries_)
    if (!replaced(e)) used += e.n_bytes;
  while (used + n_bytes > budget_bytes_) {
    // NOTE: the least valuable file is the one whose job resumes last (then the oldest write's
    // path order as a tie-break); a file expected sooner than the new one is never evicted for it.
    const entry* victim = nullptr;
    for (const auto& e : entries_)
      if (!replaced(e) && (!victim || e.resume_at > victim->resume_at)) victim = &e;
    if (!victim || victim->resume_at < resume_at) return false;
    used -= victim->n_bytes;
    ++n_budget_evictions_;
    erase(std::string(victim->path));
  }
  return true;
}

spill_status spill_store::write(const block_pool& pool, int32_t seq_idx, std::span<const token_id> tokens,
                                std::string* path_out, const write_options& opt) {
  const auto& s = pool.seq(seq_idx);
  AGENTQ_KV_ASSERT(int32_t(tokens.size()) == s.n_tokens && s.n_tokens > 0);
  if (std::chrono::steady_clock::now() >= opt.deadline) return spill_status::deadline;
  header h{};
  std::memcpy(h.magic, magic, 8);
  h.version = k_version;
  h.digest_hash = digest_hash_;
  h.n_layer = layout_.n_layer;
  h.n_head_kv = layout_.n_head_kv;
  h.head_dim = layout_.head_dim;
  h.block_size = layout_.block_size;
  h.format = format_of(layout_);
  h.n_tokens = s.n_tokens;
  h.n_blocks = pool.blocks_for_tokens(s.n_tokens);
  h.job_key = opt.job_key;
  h.resume_at = opt.resume_at > 0 ? opt.resume_at : wall_now_s();
  const int64_t n_bytes = file_bytes(s.n_tokens);
  if (!make_room(n_bytes, h.resume_at, opt.job_key)) {
    ++n_budget_refused_;
    return spill_status::over_budget;
  }
  uint64_t phash = prefix_cache::root_hash;
  phash = checksum64(tokens.data(), tokens.size_bytes(), phash);
  const std::string path =
      dir_ + "/" + prefix_ + "-" + hex16(phash) + (opt.job_key ? "-" + hex16(opt.job_key) : std::string()) + ".kv";
  // NOTE: crash-safe: the bytes reach the disk under a temp name (pid-tagged, so a start-up
  // sweep can tell a dead writer's from a live one's), then the rename and the directory entry.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return spill_status::io_error;
  spill_status st = spill_status::ok;
  uint64_t sum = 0xcbf29ce484222325ull;
  // NOTE: the checksum covers header, tokens and payload in file order, chained per chunk
  // (each chunk is a multiple of 8 bytes except possibly the tokens; chained the same way on read).
  sum = checksum64(&h, sizeof h, sum);
  bool ok = write_fd(fd, &h, sizeof h);
  sum = checksum64(tokens.data(), tokens.size_bytes(), sum);
  ok = ok && write_fd(fd, tokens.data(), tokens.size_bytes());
  const size_t blk_bytes = size_t(layout_.block_elem_bytes());
  // NOTE: blocks are read through the pool's memory (host or device) in chunks, so a long
  // sequence never needs a second full copy in host memory; the chunk is already in file order.
  // Windowed KV: blocks before the window are written without their windowed layers (gone).
  constexpr int32_t k_chunk_blocks = 32;
  const int32_t wf = std::min(layout_.window_block(s.n_tokens), h.n_blocks);
  std::vector<uint8_t> chunk;
  for (int32_t b0 = 0; b0 < h.n_blocks && ok;) {
    if (std::chrono::steady_clock::now() >= opt.deadline) {
      st = spill_status::deadline;
      break;
    }
    const bool whole = b0 >= wf;
    const int32_t n = std::min(k_chunk_blocks, (whole ? h.n_blocks : wf) - b0);
    chunk.resize(size_t(n) * size_t(whole ? layout_.block_bytes() : layout_.block_bytes_full_layers()));
    ok = pool.memory().read_blocks(std::span<const int32_t>(s.blocks.data() + b0, size_t(n)), chunk.data(), whole);
    for (size_t off = 0; ok && off < chunk.size(); off += blk_bytes)  // K, V of each layer
      sum = checksum64(chunk.data() + off, blk_bytes, sum);
    ok = ok && write_fd(fd, chunk.data(), chunk.size());
    b0 += n;
  }
  ok = ok && st == spill_status::ok && write_fd(fd, &sum, sizeof sum) && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    return st == spill_status::ok ? spill_status::io_error : st;
  }
  // NOTE: without this the rename may be lost in a power cut even though the data is on disk.
  if (opt.sync_dir) fsync_dir(dir_);
  for (size_t i = 0; i < entries_.size();) {
    const entry& e = entries_[i];
    if (e.path == path) {
      entries_.erase(entries_.begin() + ptrdiff_t(i));
    } else if (opt.job_key != 0 && e.job_key == opt.job_key) {  // the job's older KV: superseded
      fs::remove(e.path, ec);
      entries_.erase(entries_.begin() + ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  entries_.push_back({path, std::vector<token_id>(tokens.begin(), tokens.end()), opt.job_key, h.resume_at, n_bytes});
  if (path_out) *path_out = path;
  return spill_status::ok;
}

int32_t spill_store::find(std::span<const token_id> tokens, int32_t* n_common) const {
  int32_t best = -1, best_n = 0;
  for (int32_t i = 0; i < int32_t(entries_.size()); ++i) {
    const auto& t = entries_[size_t(i)].tokens;
    const size_t lim = std::min(t.size(), tokens.size());
    size_t n = 0;
    while (n < lim && t[n] == tokens[n]) ++n;
    if (int32_t(n) > best_n) { best_n = int32_t(n); best = i; }
  }
  if (best_n < layout_.block_size) best = -1;
  *n_common = best < 0 ? 0 : best_n;
  return best;
}

bool spill_store::restore(int32_t entry_idx, int32_t n_tokens, block_pool& pool, int32_t seq_idx) {
  const entry e = entries_[size_t(entry_idx)];
  entries_.erase(entries_.begin() + entry_idx);
  std::vector<uint8_t> buf;
  header h{};
  std::vector<token_id> toks;
  const size_t blk_bytes = size_t(layout_.block_elem_bytes());
  bool ok = read_all(e.path, &buf) && parse_header(buf, digest_hash_, layout_, &h, &toks);
  const size_t hb = ok ? header_bytes(h.version) : 0;
  const size_t payload_off = hb + toks.size() * sizeof(token_id);
  const int32_t wf = ok ? std::min(layout_.window_block(h.n_tokens), h.n_blocks) : 0;  // see write()
  const size_t payload = ok ? size_t(layout_.seq_bytes(h.n_tokens)) : 0;
  ok = ok && buf.size() == payload_off + payload + sizeof(uint64_t);
  if (ok) {
    uint64_t sum = 0xcbf29ce484222325ull;
    sum = checksum64(buf.data(), hb, sum);
    sum = checksum64(buf.data() + hb, toks.size() * sizeof(token_id), sum);
    for (size_t off = payload_off; off < payload_off + payload; off += blk_bytes)
      sum = checksum64(buf.data() + off, blk_bytes, sum);
    uint64_t stored;
    std::memcpy(&stored, buf.data() + payload_off + payload, sizeof stored);
    ok = sum == stored && toks == e.tokens;
  }
  std::error_code ec;
  if (!ok) {
    ++n_corrupt_;
    fs::remove(e.path, ec);
    return false;
  }
  n_tokens = std::min(n_tokens, h.n_tokens);
  // Windowed KV: a shorter prefix needs its own window's windowed layers, which the file has
  // from block wf on only.
  if (layout_.window_block(n_tokens) < wf) {
    entries_.push_back(e);  // still valid on disk
    return false;
  }
  const int32_t nb = pool.blocks_for_tokens(n_tokens);
  if (!pool.reserve_restore(seq_idx, n_tokens, wf)) {
    pool.truncate(seq_idx, 0);
    entries_.push_back(e);  // still valid on disk
    return false;
  }
  // The payload is [block][layer][K, V][block_elems], the order write_blocks takes (blocks
  // before wf without their windowed layers).
  const auto& s = pool.seq(seq_idx);
  const uint8_t* in = buf.data() + payload_off;
  const int32_t n_short = std::min(wf, nb);
  bool written = pool.memory().write_blocks(std::span<const int32_t>(s.blocks.data(), size_t(n_short)), in, false);
  in += size_t(n_short) * size_t(layout_.block_bytes_full_layers());
  written = written && pool.memory().write_blocks(std::span<const int32_t>(s.blocks.data() + n_short, size_t(nb - n_short)), in);
  if (!written) {
    pool.truncate(seq_idx, 0);
    entries_.push_back(e);  // the device failed, not the file
    return false;
  }
  pool.set_n_tokens(seq_idx, n_tokens);
  fs::remove(e.path, ec);  // NOTE: the KV is resident again; a later park writes a fresh file
  return true;
}

bool spill_store::sync_dir() const { return fsync_dir(dir_); }

void spill_store::erase(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.path == path; }),
                 entries_.end());
}

const spill_store::entry* spill_store::find_path(const std::string& path) const {
  for (const auto& e : entries_)
    if (e.path == path) return &e;
  return nullptr;
}

int32_t spill_store::erase_job(uint64_t job_key) {
  if (job_key == 0) return 0;
  std::vector<std::string> paths;
  for (const auto& e : entries_)
    if (e.job_key == job_key) paths.push_back(e.path);
  for (const auto& p : paths) erase(p);
  return int32_t(paths.size());
}

int32_t spill_store::prune(const std::function<bool(uint64_t job_key)>& live) {
  std::vector<std::string> paths;
  for (const auto& e : entries_)
    if (e.job_key != 0 && !live(e.job_key)) paths.push_back(e.path);
  for (const auto& p : paths) erase(p);
  n_orphans_removed_ += int64_t(paths.size());
  return int32_t(paths.size());
}

int64_t spill_store::n_blocks_on_disk() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += (int64_t(e.tokens.size()) + layout_.block_size - 1) / layout_.block_size;
  return n;
}

int64_t spill_store::n_bytes_on_disk() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.n_bytes;
  return n;
}

}  // namespace agentq
