// The CUDA forward backend: cuda_forward for the pass, and its device KV blocks as the
// pool's kv_memory. Copy-on-write copies run device-to-device on the compute stream;
// spill reads and restores run on kernels::cuda::kv_copy_stream() through a pinned
// staging buffer, ordered against the compute stream with events:
//  - read (spill): the copy stream waits for the compute stream's work so far; the host
//    waits for the copy (the file write needs the data).
//  - write (restore): the host returns once the copy is queued; the next forward pass or
//    copy-on-write waits for it on the device, so the engine thread plans the step while
//    the restore is in flight.
// Windowed KV (set_windowed_kv, on by default in the engine): the layout marks the model's
// sliding-window layers as on the CPU (model::with_layer_windows), the device memory is a pool of
// per-layer pages and this backend owns the (block, layer) -> page table the block_pool fills,
// so residency, spill files and their accounting count what the device holds; copies go page by
// page (a windowed layer's page outside the window is skipped or left out, as kv_store does).
#if AGENTQ_HAVE_CUDA

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_forward.h"

namespace agentq {

namespace cu = kernels::cuda;

namespace {

class cuda_backend final : public forward_backend, public kv_memory {
 public:
  cuda_backend(int32_t ordinal, std::unique_ptr<cuda_forward> fwd) : ordinal_(ordinal), fwd_(std::move(fwd)) {
    compute_done_ = cu::event_create();
    copy_done_ = cu::event_create();
    name_ = "cuda:" + std::to_string(ordinal) + " (" + cu::device_name() + ")";
  }
  ~cuda_backend() override {
    cu::set_device(ordinal_);
    if (copy_pending_) cu::event_synchronize(copy_done_);
    cu::event_destroy(compute_done_);
    cu::event_destroy(copy_done_);
    fwd_.reset();  // NOTE: frees device memory with this device current
  }
  bool ok() const { return compute_done_ && copy_done_; }

  // --- forward_backend
  const model_hparams& hparams() const override { return fwd_->hparams(); }
  std::string device() const override { return name_; }
  kv_layout kv_layout_for(int32_t block_size) const override {
    const kv_layout l = forward_backend::kv_layout_for(block_size);
    return windowed_ ? model::with_layer_windows(l, hparams()) : l;
  }
  bool set_windowed_kv(bool on) override {
    windowed_ = on;
    return true;
  }
  bool alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error) override {
    cu::set_device(ordinal_);
    layout_ = kv_layout_for(block_size);
    table_.reset();
    if (layout_.window > 0) {
      table_ = std::make_unique<kv_page_table>(layout_, n_blocks);
      n_blocks_ = table_->n_block_ids();
      if (!fwd_->alloc_kv(block_size, n_blocks, error, n_blocks_)) return false;
      fwd_->set_page_table(table_.get());
      return true;
    }
    n_blocks_ = n_blocks;
    return fwd_->alloc_kv(block_size, n_blocks, error);
  }
  kv_memory& kv() override { return *this; }
  int32_t forward(std::span<const batch_seq> seqs, float* logits) override {
    if (!enter()) return -1;
    return fwd_->forward(seqs, logits);
  }
  float* logits_buffer(size_t floats) override {
    if (host_logits_.bytes() < floats * 4) {
      cu::set_device(ordinal_);
      host_logits_ = cu::pinned_buffer();  // NOTE: free first: the new one may need its memory
      host_logits_ = cu::pinned_buffer(floats * 4 + floats * 4 / 4);  // 25% headroom for a growing batch
    }
    return host_logits_.ok() ? host_logits_.as<float>() : nullptr;
  }
  std::string failure() const override { return cu::cuda_failed() ? cu::cuda_failed_reason() : ""; }

  // --- kv_memory
  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return n_blocks_; }
  kv_page_table* pages() override { return table_.get(); }
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override {
    // NOTE: a failure here is sticky or a bad argument; either way cuda_failed() or the next
    // forward() reports it.
    if (!enter()) return;
    const int64_t n_floats = int64_t(n_rows) * layout_.row();
    if (!table_) {
      cu::kv_copy_block_rows(fwd_->kv(), src, dst, n_floats, fwd_->stream());
      return;
    }
    // Page by page (kv() is one "layer" of pages); a windowed layer's page may be gone in src
    // (outside its window), then dst has none either (kv_store::copy_rows).
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      const int32_t ps = table_->page(src, l), pd = table_->page(dst, l);
      if (ps >= 0 && pd >= 0) cu::kv_copy_block_rows(fwd_->kv(), ps, pd, n_floats, fwd_->stream());
    }
  }
  bool read_blocks(std::span<const int32_t> blocks, void* out, bool with_windowed = true) override {
    const std::vector<int32_t> units = copy_units(blocks, with_windowed);
    if (!enter() || !stage(units.size())) return false;
    // The copy stream must see every K/V write queued on the compute stream so far.
    if (!cu::event_record(compute_done_, fwd_->stream()) || !cu::stream_wait_event(cu::kv_copy_stream(), compute_done_))
      return false;
    if (!cu::kv_spill_blocks(fwd_->kv(), units.data(), slots_.data(), int32_t(units.size()), staging_.as<float>()) ||
        !cu::event_record(copy_done_, cu::kv_copy_stream()) || !cu::event_synchronize(copy_done_))
      return false;
    copy_pending_ = false;
    std::memcpy(out, staging_.data(), units.size() * unit_bytes());
    return true;
  }
  bool write_blocks(std::span<const int32_t> blocks, const void* in, bool with_windowed = true) override {
    const std::vector<int32_t> units = copy_units(blocks, with_windowed);
    if (!enter() || !stage(units.size())) return false;
    std::memcpy(staging_.data(), in, units.size() * unit_bytes());
    // NOTE: the blocks were just allocated, but copy-on-write copies into them may still be queued.
    if (!cu::event_record(compute_done_, fwd_->stream()) || !cu::stream_wait_event(cu::kv_copy_stream(), compute_done_))
      return false;
    if (!cu::kv_restore_blocks(fwd_->kv(), slots_.data(), units.data(), int32_t(units.size()),
                               staging_.as<float>()) ||
        !cu::event_record(copy_done_, cu::kv_copy_stream()))
      return false;
    copy_pending_ = true;
    return true;
  }

 private:
  // What one staging slot holds: a block of every layer, or with windowed KV one page (one
  // layer's K and V). NOTE: the device blocks are F32 (kv_type() below): 4-byte elements.
  size_t unit_bytes() const { return table_ ? size_t(2 * layout_.block_elem_bytes()) : size_t(layout_.block_bytes()); }
  // The device units a spill or restore of blocks copies, in the file's [block][layer] order: the
  // blocks themselves, or (windowed) their pages, without the windowed layers' when !with_windowed.
  std::vector<int32_t> copy_units(std::span<const int32_t> blocks, bool with_windowed) const {
    if (!table_) return {blocks.begin(), blocks.end()};
    std::vector<int32_t> pages;
    pages.reserve(blocks.size() * size_t(layout_.n_layer));
    for (int32_t b : blocks)
      for (int32_t l = 0; l < layout_.n_layer; ++l) {
        if (!with_windowed && layout_.layer_windowed[size_t(l)]) continue;
        const int32_t p = table_->page(b, l);
        if (p < 0) {  // as kv_store::offset: a broken invariant of the pool, not a device error
          std::fprintf(stderr, "%s:%d: cuda KV: block %d has no page for layer %d\n", __FILE__, __LINE__, b, l);
          std::abort();
        }
        pages.push_back(p);
      }
    return pages;
  }

  // Every entry point: this thread's current device, no sticky error, and the compute stream
  // ordered after a restore still in flight.
  bool enter() {
    if (cu::cuda_failed() || !cu::set_device(ordinal_)) return false;
    if (copy_pending_) {
      if (!cu::stream_wait_event(fwd_->stream(), copy_done_)) return false;
      if (cu::event_query(copy_done_)) copy_pending_ = false;
    }
    return true;
  }
  // Room for n blocks in the pinned staging buffer (idle: a pending restore reads it) and slot ids 0..n-1.
  bool stage(size_t n) {
    if (copy_pending_ && !cu::event_synchronize(copy_done_)) return false;
    copy_pending_ = false;
    if (staging_.bytes() < n * unit_bytes()) {
      staging_ = cu::pinned_buffer();
      staging_ = cu::pinned_buffer(n * unit_bytes());
      if (!staging_.ok()) return false;
    }
    for (int32_t i = int32_t(slots_.size()); i < int32_t(n); ++i) slots_.push_back(i);
    return true;
  }

  int32_t ordinal_;
  std::unique_ptr<cuda_forward> fwd_;
  std::string name_;
  kv_layout layout_;
  int32_t n_blocks_ = 0;
  cu::pinned_buffer host_logits_;  // logits_buffer()
  void* compute_done_ = nullptr;  // cudaEvent_t on the compute stream
  void* copy_done_ = nullptr;     // cudaEvent_t on the copy stream: the latest spill/restore
  bool copy_pending_ = false;     // a restore may still be in flight
  cu::pinned_buffer staging_;     // [n][n_layer][K, V][block_elems] floats (windowed: [n pages][K, V][block_elems])
  bool windowed_ = false;         // set_windowed_kv
  std::unique_ptr<kv_page_table> table_;  // windowed KV: (block, layer) -> page, filled by the block_pool
  std::vector<int32_t> slots_;    // 0, 1, 2, ... (staging slots)
};

}  // namespace

std::unique_ptr<forward_backend> make_cuda_backend(int32_t ordinal, std::shared_ptr<const gguf::file> file,
                                                   std::string* error) {
  if (!cu::set_device(ordinal)) {
    *error = "cannot select CUDA device " + std::to_string(ordinal);
    return nullptr;
  }
  auto fwd = cuda_forward::create(std::move(file), 16, 0, error);
  if (!fwd) return nullptr;
  auto b = std::make_unique<cuda_backend>(ordinal, std::move(fwd));
  if (!b->ok()) {
    *error = "cannot create CUDA events";
    return nullptr;
  }
  return b;
}

}  // namespace agentq

#endif  // AGENTQ_HAVE_CUDA
