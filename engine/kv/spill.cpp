// Spill tier: write / index / verify / restore K/V files.
#include "kv/spill.h"

#include <algorithm>
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
};

uint32_t format_of(const kv_layout& l) { return uint32_t(l.dtype) | (l.head_major ? 1u << 8 : 0u); }

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
  if (buf.size() < sizeof(header)) return false;
  std::memcpy(h, buf.data(), sizeof(header));
  if (std::memcmp(h->magic, magic, 8) != 0 || h->version != 1 || h->digest_hash != digest_hash) return false;
  if (h->n_layer != lay.n_layer || h->n_head_kv != lay.n_head_kv || h->head_dim != lay.head_dim ||
      h->block_size != lay.block_size || h->format != format_of(lay))
    return false;
  if (h->n_tokens <= 0 || h->n_blocks != (h->n_tokens + lay.block_size - 1) / lay.block_size) return false;
  const size_t tok_bytes = size_t(h->n_tokens) * sizeof(token_id);
  if (buf.size() < sizeof(header) + tok_bytes) return false;
  tokens->resize(size_t(h->n_tokens));
  std::memcpy(tokens->data(), buf.data() + sizeof(header), tok_bytes);
  return true;
}
}  // namespace

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

spill_store::spill_store(std::string dir, const std::string& model_digest, kv_layout layout)
    : dir_(std::move(dir)), layout_(layout) {
  digest_hash_ = checksum64(model_digest.data(), model_digest.size());
  prefix_ = hex16(digest_hash_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  rebuild_index();
}

void spill_store::rebuild_index() {
  entries_.clear();
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir_, ec)) {
    const std::string name = de.path().filename().string();
    if (name.rfind(prefix_, 0) != 0 || de.path().extension() != ".kv") continue;
    std::vector<uint8_t> buf;
    // NOTE: reads only the header and tokens; the checksum over the payload is verified on
    // restore, when the data is about to be used.
    std::ifstream f(de.path(), std::ios::binary);
    buf.resize(sizeof(header));
    if (!f.read(reinterpret_cast<char*>(buf.data()), sizeof(header))) continue;
    header h;
    std::memcpy(&h, buf.data(), sizeof h);
    if (h.n_tokens <= 0 || h.n_tokens > (1 << 26)) continue;
    buf.resize(sizeof(header) + size_t(h.n_tokens) * sizeof(token_id));
    if (!f.read(reinterpret_cast<char*>(buf.data() + sizeof(header)), std::streamsize(buf.size() - sizeof(header)))) continue;
    entry e;
    if (!parse_header(buf, digest_hash_, layout_, &h, &e.tokens)) continue;
    e.path = de.path().string();
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) { return a.path < b.path; });
}

bool spill_store::write(const block_pool& pool, int32_t seq_idx, std::span<const token_id> tokens, std::string* path_out) {
  const auto& s = pool.seq(seq_idx);
  AGENTQ_KV_ASSERT(int32_t(tokens.size()) == s.n_tokens && s.n_tokens > 0);
  header h{};
  std::memcpy(h.magic, magic, 8);
  h.version = 1;
  h.digest_hash = digest_hash_;
  h.n_layer = layout_.n_layer;
  h.n_head_kv = layout_.n_head_kv;
  h.head_dim = layout_.head_dim;
  h.block_size = layout_.block_size;
  h.format = format_of(layout_);
  h.n_tokens = s.n_tokens;
  h.n_blocks = pool.blocks_for_tokens(s.n_tokens);
  uint64_t phash = prefix_cache::root_hash;
  phash = checksum64(tokens.data(), tokens.size_bytes(), phash);
  const std::string path = dir_ + "/" + prefix_ + "-" + hex16(phash) + ".kv";
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return false;
  uint64_t sum = 0xcbf29ce484222325ull;
  auto put = [&](const void* p, size_t n) {
    f.write(static_cast<const char*>(p), std::streamsize(n));
  };
  // NOTE: the checksum covers header, tokens and payload in file order, chained per chunk
  // (each chunk is a multiple of 8 bytes except possibly the tokens; chained the same way on read).
  sum = checksum64(&h, sizeof h, sum);
  put(&h, sizeof h);
  sum = checksum64(tokens.data(), tokens.size_bytes(), sum);
  put(tokens.data(), tokens.size_bytes());
  const size_t blk_bytes = size_t(layout_.block_elem_bytes());
  // NOTE: blocks are read through the pool's memory (host or device) in chunks, so a long
  // sequence never needs a second full copy in host memory.
  constexpr int32_t k_chunk_blocks = 32;
  std::vector<uint8_t> chunk;
  bool read_ok = true;
  for (int32_t b0 = 0; b0 < h.n_blocks && read_ok; b0 += k_chunk_blocks) {
    const int32_t n = std::min(k_chunk_blocks, h.n_blocks - b0);
    chunk.resize(size_t(n) * size_t(layout_.block_bytes()));
    read_ok = pool.memory().read_blocks(std::span<const int32_t>(s.blocks.data() + b0, size_t(n)), chunk.data());
    const uint8_t* p = chunk.data();
    for (size_t off = 0; read_ok && off < chunk.size(); off += blk_bytes) {  // K, V of each layer
      sum = checksum64(p + off, blk_bytes, sum);
      put(p + off, blk_bytes);
    }
  }
  put(&sum, sizeof sum);
  f.close();
  if (!f || !read_ok) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return false;
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.path == path; }),
                 entries_.end());
  entries_.push_back({path, std::vector<token_id>(tokens.begin(), tokens.end())});
  if (path_out) *path_out = path;
  return true;
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
  header h;
  std::vector<token_id> toks;
  const size_t blk_bytes = size_t(layout_.block_elem_bytes());
  bool ok = read_all(e.path, &buf) && parse_header(buf, digest_hash_, layout_, &h, &toks);
  const size_t payload_off = sizeof(header) + toks.size() * sizeof(token_id);
  const size_t payload = size_t(h.n_blocks) * size_t(layout_.n_layer) * 2 * blk_bytes;
  ok = ok && buf.size() == payload_off + payload + sizeof(uint64_t);
  if (ok) {
    uint64_t sum = 0xcbf29ce484222325ull;
    sum = checksum64(buf.data(), sizeof(header), sum);
    sum = checksum64(buf.data() + sizeof(header), toks.size() * sizeof(token_id), sum);
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
  if (!pool.reserve(seq_idx, n_tokens)) {
    pool.truncate(seq_idx, 0);
    entries_.push_back(e);  // still valid on disk
    return false;
  }
  // The payload is [block][layer][K, V][block_elems], the order write_blocks takes.
  const auto& s = pool.seq(seq_idx);
  if (!pool.memory().write_blocks(std::span<const int32_t>(s.blocks.data(), size_t(pool.blocks_for_tokens(n_tokens))),
                                  buf.data() + payload_off)) {
    pool.truncate(seq_idx, 0);
    entries_.push_back(e);  // the device failed, not the file
    return false;
  }
  pool.set_n_tokens(seq_idx, n_tokens);
  fs::remove(e.path, ec);  // NOTE: the KV is resident again; a later park writes a fresh file
  return true;
}

void spill_store::erase(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.path == path; }),
                 entries_.end());
}

int64_t spill_store::n_blocks_on_disk() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += (int64_t(e.tokens.size()) + layout_.block_size - 1) / layout_.block_size;
  return n;
}

}  // namespace agentq
