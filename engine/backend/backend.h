// The forward backend the engine's scheduler step calls: one model on one device with
// its paged KV blocks. "cpu" runs model::forward over a host kv_store; "cuda" / "cuda:N"
// runs cuda_forward over device blocks (built with AGENTQ_HAVE_CUDA). Block-level KV
// operations (copy-on-write, spill, restore) go through kv(), so the pool, the prefix
// cache and the disk tier work the same on either device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kv/kv_store.h"
#include "model/model.h"

namespace agentq {

struct device_spec {
  enum kind { cpu, cuda } kind = cpu;
  int32_t ordinal = 0;  // cuda:N
};
// "cpu", "cuda" (= cuda:0) or "cuda:N"; false + *error otherwise.
bool parse_device(const std::string& text, device_spec* out, std::string* error);

class forward_backend {
 public:
  // Loads the model's weights for the device. nullptr + *error (naming the device) on failure:
  // an unknown device string, "cuda" in a build without CUDA, no such CUDA device, out of
  // device memory, an unsupported model. Never falls back to another device.
  static std::unique_ptr<forward_backend> create(const std::string& device, std::shared_ptr<const gguf::file> file,
                                                 int32_t n_threads, std::string* error);
  virtual ~forward_backend() = default;

  virtual const model_hparams& hparams() const = 0;
  // "cpu", or "cuda:0 (NVIDIA H200)".
  virtual std::string device() const = 0;
  // The K/V blocks alloc_kv(block_size, ...) makes (default: token-major, kv_type() elements).
  virtual kv_layout kv_layout_for(int32_t block_size) const {
    const auto& h = hparams();
    return {h.n_layer, h.n_head_kv, h.head_dim, block_size, kv_type()};
  }
  // The element type of the K/V blocks: the CPU stores F16 unless set_kv_type(f32); the CUDA
  // backend stores F32 only. Set before alloc_kv; false + *error for a type the device lacks.
  virtual kv_dtype kv_type() const { return kv_dtype::f32; }
  virtual bool set_kv_type(kv_dtype t, std::string* error) {
    if (t == kv_type()) return true;
    *error = "device '" + device() + "' stores K/V as " + kv_dtype_name(kv_type()) + " only (asked for " +
             kv_dtype_name(t) + ")";
    return false;
  }

  // Windowed KV (kv_layout::window): sliding-window layers hold only their window's blocks
  // (the CPU's host pages, the CUDA backend's device pages: kv_memory::pages()); false where
  // unsupported. Set before alloc_kv.
  virtual bool set_windowed_kv(bool on) { return !on; }

  // Allocate the KV blocks (once, before kv() and forward()); false + *error when they do not fit.
  virtual bool alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error) = 0;
  virtual kv_memory& kv() = 0;

  // As model::forward, with K/V in kv(): logits is host memory, [rows][n_vocab]. Returns the
  // rows written; -1 when the device failed (failure() says why when the failure is sticky).
  virtual int32_t forward(std::span<const batch_seq> seqs, float* logits) = 0;
  // Host memory for forward()'s logits that the device writes fastest (the CUDA backend: pinned,
  // so a 128-sequence step's tens of MB are not staged through a driver bounce buffer); valid
  // until the next call. nullptr: the caller uses its own memory.
  virtual float* logits_buffer(size_t floats) {
    (void)floats;
    return nullptr;
  }

  // "" while the device is usable; after a sticky device error (kernels::cuda::cuda_failed())
  // the reason, and every later call fails.
  virtual std::string failure() const { return {}; }
};

}  // namespace agentq
