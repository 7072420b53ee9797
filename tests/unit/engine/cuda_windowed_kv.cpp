// Windowed KV on the CUDA path, without a device: the CUDA backend's memory emulated on the host
// (a page pool + the (block, layer) -> page table, mirrored to a "device" copy only through the
// rows take_dirty() reports, as cuda_forward::upload_pages does), driven by the same block_pool
// as the CPU. Checks which pages are live (windowed layers: the window's blocks only), that pages
// are recycled (a sequence far longer than whole layers would fit), that the mirror never misses
// a change, and what the kernels' references visit: K/V written through the page map
// (ref::kv_write) and decode / prefill attention over it (ref::attention_decode / _prefill) give
// the full-KV store's bits, while every page outside the live set, and the map's holes, read NaN
// (a visit outside the window would show). Plus the decode grid's window partitions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "kv/block_pool.h"

using namespace agentq;
namespace cu = kernels::cuda;
namespace ref = kernels::ref;

namespace {

constexpr int32_t k_layers = 4, k_heads = 4, k_heads_kv = 2, k_dim = 8, k_bs = 16, k_window = 40;
constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();

// Gemma 3's shape in miniature: layers 0-2 windowed (window 40), layer 3 full; token-major F32 (CUDA's).
kv_layout cuda_layout() {
  kv_layout l{k_layers, k_heads_kv, k_dim, k_bs, kv_dtype::f32};
  l.window = k_window;
  for (int il = 0; il < 3; ++il) l.layer_windowed.set(size_t(il));
  return l;
}
int32_t layer_window(int32_t il) { return il < 3 ? k_window : 0; }

// Every layer whole, as the CUDA backend without windowed KV: [n_layer][n_ids][block_elems].
struct full_store {
  explicit full_store(int32_t n_ids) : n_ids(n_ids), k(size_t(k_layers) * n_ids * k_bs * k_heads_kv * k_dim, 0.0f), v(k.size(), 0.0f) {}
  float* k_layer(int32_t il) { return k.data() + size_t(il) * n_ids * k_bs * k_heads_kv * k_dim; }
  float* v_layer(int32_t il) { return v.data() + size_t(il) * n_ids * k_bs * k_heads_kv * k_dim; }
  // copy-on-write of every layer (the paged memory copies the pages it has)
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) {
    const size_t be = size_t(k_bs) * k_heads_kv * k_dim, n = size_t(n_rows) * k_heads_kv * k_dim;
    for (int32_t il = 0; il < k_layers; ++il) {
      std::memcpy(k_layer(il) + size_t(dst) * be, k_layer(il) + size_t(src) * be, n * 4);
      std::memcpy(v_layer(il) + size_t(dst) * be, v_layer(il) + size_t(src) * be, n * 4);
    }
  }
  int32_t n_ids;
  std::vector<float> k, v;
};

// The CUDA backend's kv_memory on the host: pages [n_pages + 1][block_elems] for K and V (the last
// page is all NaN and stands for the map's holes), the page table the pool fills, and the device
// mirror of that table, updated from the dirty rows only.
class emulated_device final : public kv_memory {
 public:
  emulated_device(kv_layout l, int32_t n_blocks)
      : layout_(l), table_(l, n_blocks),
        k_(size_t(table_.n_pages() + 1) * l.block_elems(), k_nan),
        v_(k_.size(), k_nan),
        mirror_(size_t(table_.n_block_ids()) * l.n_layer, -1) {}
  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return table_.n_block_ids(); }
  kv_page_table* pages() override { return &table_; }
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override {
    if (full) full->copy_rows(src, dst, n_rows);
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      const int32_t ps = table_.page(src, l), pd = table_.page(dst, l);
      if (ps < 0 || pd < 0) continue;
      const size_t n = size_t(n_rows) * layout_.row();
      std::memcpy(k(pd), k(ps), n * 4);
      std::memcpy(v(pd), v(ps), n * 4);
    }
  }
  bool read_blocks(std::span<const int32_t>, void*, bool) override { return false; }
  bool write_blocks(std::span<const int32_t>, const void*, bool) override { return false; }

  // cuda_forward::upload_pages: the rows changed since the last call -> the mirror; then every
  // page no block holds is poisoned (what a visit to it would read must show).
  int32_t sync() {
    const std::vector<int32_t> dirty = table_.take_dirty();
    for (int32_t b : dirty)
      for (int32_t l = 0; l < layout_.n_layer; ++l)
        mirror_[size_t(b) * layout_.n_layer + l] = table_.page(b, l);
    std::vector<uint8_t> held(size_t(table_.n_pages()), 0);
    for (int32_t p : mirror_)
      if (p >= 0) held[size_t(p)] = 1;
    for (int32_t p = 0; p < table_.n_pages(); ++p)
      if (!held[size_t(p)]) {
        std::fill(k(p), k(p) + layout_.block_elems(), k_nan);
        std::fill(v(p), v(p) + layout_.block_elems(), k_nan);
      }
    return int32_t(dirty.size());
  }
  bool mirror_equals_table() const {
    return std::memcmp(mirror_.data(), table_.data(), mirror_.size() * 4) == 0;
  }
  // The map the kernels get for layer il: holes (-1) -> the NaN page.
  cu::kv_page_map map(int32_t il) {
    kernel_map_ = mirror_;
    for (int32_t& p : kernel_map_)
      if (p < 0) p = table_.n_pages();
    return {kernel_map_.data(), layout_.n_layer, il};
  }
  float* k_pool() { return k_.data(); }
  float* v_pool() { return v_.data(); }
  const kv_page_table& table() const { return table_; }
  full_store* full = nullptr;  // the reference store, copied alongside

 private:
  float* k(int32_t p) { return k_.data() + size_t(p) * layout_.block_elems(); }
  float* v(int32_t p) { return v_.data() + size_t(p) * layout_.block_elems(); }
  kv_layout layout_;
  kv_page_table table_;
  std::vector<float> k_, v_;
  std::vector<int32_t> mirror_, kernel_map_;
};

float value(uint32_t a, uint32_t b, uint32_t c) {  // deterministic in [-1, 1)
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ (c + 0x165667B1u) * 0xC2B2AE3Du;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12;
  return float(h & 0xFFFFFF) / float(0x800000) - 1.0f;
}

struct rig {
  emulated_device dev;
  block_pool pool;
  full_store full;
  explicit rig(int32_t n_blocks) : dev(cuda_layout(), n_blocks), pool(dev), full(dev.n_blocks()) { dev.full = &full; }

  // Write n tokens of seq from position n0 into both stores (ref::kv_write, through the map).
  void write(int32_t seq, int32_t n0, int32_t n, uint32_t salt) {
    REQUIRE(pool.reserve(seq, n0 + n));
    dev.sync();
    const int32_t row = k_heads_kv * k_dim;
    const auto& table = pool.seq(seq).blocks;
    std::vector<float> kn(size_t(n) * row), vn(kn.size());
    std::vector<int32_t> pos(static_cast<size_t>(n)), tok_seq(static_cast<size_t>(n), 0);
    for (int32_t il = 0; il < k_layers; ++il) {
      for (int32_t t = 0; t < n; ++t) {
        pos[size_t(t)] = n0 + t;
        for (int32_t i = 0; i < row; ++i) {
          kn[size_t(t) * row + i] = value(salt, uint32_t(il * 100000 + (n0 + t)), uint32_t(i));
          vn[size_t(t) * row + i] = value(salt + 1, uint32_t(il * 100000 + (n0 + t)), uint32_t(i));
        }
      }
      ref::kv_write(kn.data(), vn.data(), pos.data(), tok_seq.data(), table.data(), int32_t(table.size()), n, row,
                    k_bs, dev.k_pool(), dev.v_pool(), dev.map(il));
      ref::kv_write(kn.data(), vn.data(), pos.data(), tok_seq.data(), table.data(), int32_t(table.size()), n, row,
                    k_bs, full.k_layer(il), full.v_layer(il));
    }
  }

  // The live pages: windowed layers only from the window's first block on, full layers everywhere.
  void check_live(int32_t seq) {
    const auto& s = pool.seq(seq);
    const int32_t from = pool.layout().window_block(s.n_tokens);
    for (size_t i = 0; i < s.blocks.size(); ++i)
      for (int32_t il = 0; il < k_layers; ++il) {
        const bool live = dev.table().page(s.blocks[i], il) >= 0;
        CHECK_MESSAGE(live == (layer_window(il) == 0 || int32_t(i) >= from), "block ", i, " layer ", il);
      }
  }
};

std::vector<float> queries(int32_t n_rows, uint32_t salt) {
  std::vector<float> q(size_t(n_rows) * k_heads * k_dim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = value(salt, uint32_t(i), 7u);
  return q;
}

bool finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

TEST_CASE("cuda windowed kv: the decode grid covers the window's partitions only") {
  const int32_t P = cu::attention_partition;
  for (int32_t window : {0, 40, 256, 300, 512, 1024}) {
    for (int32_t len = 1; len <= 5000; len += 7) {
      CAPTURE(window);
      CAPTURE(len);
      const int32_t max_parts = (len + P - 1) / P + 1;  // a graphed bucket may be wider than len
      const int32_t first = cu::attention_first_part(len, window, P);
      const int32_t n_grid = cu::attention_window_parts(window, max_parts, P);
      const int32_t first_key = window > 0 ? std::max(0, len - window) : 0;
      // the first partition holds the first visible key; the grid reaches the last key
      CHECK(first * P <= first_key);
      CHECK(first_key < (first + 1) * P);
      CHECK((first + n_grid) * P >= len);
      CHECK(n_grid <= max_parts);
      if (window > 0) CHECK(n_grid <= (window + P - 1) / P + 1);  // bounded by the window, not the depth
    }
  }
}

TEST_CASE("cuda windowed kv: live pages, recycling, the mirrored map and decode attention over it") {
  // 18 blocks' worth of memory: 288 tokens with every layer whole; windowed, the full layer's
  // pages plus the window's ~3 blocks in the windowed ones.
  rig r(18);
  const kv_layout& l = r.pool.layout();
  REQUIRE(r.pool.windowed());
  REQUIRE(r.dev.n_blocks() == 18 * k_layers);  // block ids: every page in a full layer
  const int32_t seq = r.pool.create_seq();
  std::set<int32_t> windowed_pages_seen;
  int64_t windowed_assignments = 0;
  std::vector<std::vector<int32_t>> last_pages;
  const int32_t n_total = 880;  // > 3x what whole layers would hold
  int32_t n_bitwise = 0;
  for (int32_t n = 0; n < n_total; ++n) {
    r.write(seq, n, 1, 11);
    // the new block's pages: count windowed assignments and distinct pages (recycling)
    const auto& s = r.pool.seq(seq);
    const int32_t b = s.blocks.back();
    if (n % k_bs == 0)
      for (int32_t il = 0; il < 3; ++il) {
        ++windowed_assignments;
        windowed_pages_seen.insert(r.dev.table().page(b, il));
      }
    // decode attention of the query at n over both stores, every layer, bit for bit
    const std::vector<float> q = queries(1, uint32_t(n));
    const int32_t len = n + 1;
    for (int32_t il = 0; il < k_layers; ++il) {
      std::vector<float> out_paged(size_t(k_heads) * k_dim), out_full(out_paged.size());
      cu::attention_options o_full{layer_window(il), 0.0f, nullptr, {}};
      cu::attention_options o_paged = o_full;
      o_paged.pages = r.dev.map(il);
      ref::attention_decode(q.data(), r.dev.k_pool(), r.dev.v_pool(), s.blocks.data(), int32_t(s.blocks.size()), &len,
                            1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, out_paged.data(), o_paged);
      ref::attention_decode(q.data(), r.full.k_layer(il), r.full.v_layer(il), s.blocks.data(),
                            int32_t(s.blocks.size()), &len, 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, out_full.data(),
                            o_full);
      REQUIRE_MESSAGE(finite(out_paged), "position ", n, " layer ", il, ": attention read a page outside the window");
      REQUIRE(std::memcmp(out_paged.data(), out_full.data(), out_full.size() * 4) == 0);
      ++n_bitwise;
    }
    r.pool.set_n_tokens(seq, n + 1);
    r.dev.sync();
    REQUIRE(r.dev.mirror_equals_table());
    r.pool.sanity();
    if (n % 50 == 49 || n == n_total - 1) {
      r.check_live(seq);
      CHECK(r.pool.n_pages_used() * 2 * l.block_elem_bytes() == l.seq_bytes(n + 1));
    }
  }
  // the sequence outgrew whole layers (288 tokens) by far, so windowed pages were recycled
  CHECK(n_total > 3 * 18 * k_bs);
  CHECK(int64_t(windowed_pages_seen.size()) < windowed_assignments);
  MESSAGE("880 positions in 18 blocks' memory: ", windowed_assignments, " windowed page assignments on ",
          windowed_pages_seen.size(), " distinct pages; ", n_bitwise, " decode attentions equal the full store's");
}

TEST_CASE("cuda windowed kv: chunked prefill and batched decode over the map equal the full store") {
  rig r(24);
  const int32_t a = r.pool.create_seq(), b = r.pool.create_seq();
  // a: prefill in chunks of 37 past the window; b: 90 tokens at once
  auto prefill = [&](int32_t seq, int32_t n0, int32_t n, uint32_t salt) {
    r.write(seq, n0, n, salt);
    const auto& s = r.pool.seq(seq);
    const std::vector<float> q = queries(n, salt * 7 + uint32_t(n0));
    const int32_t q_start[2] = {0, n}, n_past = n0;
    for (int32_t il = 0; il < k_layers; ++il) {
      std::vector<float> out_paged(size_t(n) * k_heads * k_dim), out_full(out_paged.size());
      cu::attention_options o_full{layer_window(il), 30.0f, nullptr, {}};  // with a soft-cap, as gemma2
      cu::attention_options o_paged = o_full;
      o_paged.pages = r.dev.map(il);
      ref::attention_prefill(q.data(), r.dev.k_pool(), r.dev.v_pool(), s.blocks.data(), int32_t(s.blocks.size()),
                             q_start, &n_past, 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, out_paged.data(), o_paged);
      ref::attention_prefill(q.data(), r.full.k_layer(il), r.full.v_layer(il), s.blocks.data(),
                             int32_t(s.blocks.size()), q_start, &n_past, 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f,
                             out_full.data(), o_full);
      REQUIRE_MESSAGE(finite(out_paged), "chunk at ", n0, " layer ", il);
      REQUIRE(std::memcmp(out_paged.data(), out_full.data(), out_full.size() * 4) == 0);
    }
    r.pool.set_n_tokens(seq, n0 + n);
    r.dev.sync();
    REQUIRE(r.dev.mirror_equals_table());
    r.pool.sanity();
  };
  for (int32_t n0 = 0; n0 < 185; n0 += 37) prefill(a, n0, 37, 21);
  prefill(b, 0, 90, 33);
  r.check_live(a);
  r.check_live(b);

  // Batched decode of a and b (one table row each) vs each alone: the same bits (batch invariance).
  for (int32_t step = 0; step < 40; ++step) {
    const int32_t na = r.pool.seq(a).n_tokens, nb = r.pool.seq(b).n_tokens;
    r.write(a, na, 1, 21);
    r.write(b, nb, 1, 33);
    const auto& sa = r.pool.seq(a);
    const auto& sb = r.pool.seq(b);
    const int32_t max_blocks = int32_t(std::max(sa.blocks.size(), sb.blocks.size()));
    std::vector<int32_t> tables(size_t(2) * max_blocks, 0);
    std::copy(sa.blocks.begin(), sa.blocks.end(), tables.begin());
    std::copy(sb.blocks.begin(), sb.blocks.end(), tables.begin() + max_blocks);
    const int32_t lens[2] = {na + 1, nb + 1};
    const std::vector<float> q = queries(2, 900u + uint32_t(step));
    for (int32_t il = 0; il < k_layers; ++il) {
      cu::attention_options o{layer_window(il), 0.0f, nullptr, r.dev.map(il)};
      std::vector<float> both(size_t(2) * k_heads * k_dim), alone_a(size_t(k_heads) * k_dim), alone_b(alone_a.size());
      ref::attention_decode(q.data(), r.dev.k_pool(), r.dev.v_pool(), tables.data(), max_blocks, lens, 2, k_heads,
                            k_heads_kv, k_dim, k_bs, 0.35f, both.data(), o);
      ref::attention_decode(q.data(), r.dev.k_pool(), r.dev.v_pool(), sa.blocks.data(), int32_t(sa.blocks.size()),
                            &lens[0], 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, alone_a.data(), o);
      ref::attention_decode(q.data() + k_heads * k_dim, r.dev.k_pool(), r.dev.v_pool(), sb.blocks.data(),
                            int32_t(sb.blocks.size()), &lens[1], 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f,
                            alone_b.data(), o);
      REQUIRE(finite(both));
      CHECK(std::memcmp(both.data(), alone_a.data(), alone_a.size() * 4) == 0);
      CHECK(std::memcmp(both.data() + k_heads * k_dim, alone_b.data(), alone_b.size() * 4) == 0);
    }
    r.pool.set_n_tokens(a, na + 1);
    r.pool.set_n_tokens(b, nb + 1);
    r.dev.sync();
    REQUIRE(r.dev.mirror_equals_table());
  }
  // A fork shares every block, then a write into the shared partial block copies it page by page
  // (copy-on-write: the windowed layers' pages of the window, the full layer's of every block).
  const int32_t c = r.pool.fork(a);
  const int32_t nc = r.pool.seq(c).n_tokens;
  REQUIRE(nc % k_bs != 0);
  r.write(c, nc, 1, 21);  // the same values as a would write: the copy must hold a's rows before nc
  r.pool.set_n_tokens(c, nc + 1);
  r.dev.sync();
  CHECK(r.pool.n_cow_copies() == 1);
  r.check_live(c);
  const std::vector<float> q = queries(1, 4242u);
  const int32_t len = nc + 1;
  for (int32_t il = 0; il < k_layers; ++il) {
    std::vector<float> out_c(size_t(k_heads) * k_dim), out_full(out_c.size());
    const auto& sc = r.pool.seq(c);
    cu::attention_options o{layer_window(il), 0.0f, nullptr, r.dev.map(il)};
    ref::attention_decode(q.data(), r.dev.k_pool(), r.dev.v_pool(), sc.blocks.data(), int32_t(sc.blocks.size()), &len,
                          1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, out_c.data(), o);
    cu::attention_options of{layer_window(il), 0.0f, nullptr, {}};
    ref::attention_decode(q.data(), r.full.k_layer(il), r.full.v_layer(il), sc.blocks.data(), int32_t(sc.blocks.size()),
                          &len, 1, k_heads, k_heads_kv, k_dim, k_bs, 0.35f, out_full.data(), of);
    REQUIRE(finite(out_c));
    CHECK(std::memcmp(out_c.data(), out_full.data(), out_c.size() * 4) == 0);
  }
  r.pool.sanity();
}
