// forward_backend: device parsing, the CPU backend (model::forward over a host kv_store)
// and the factory that picks the CUDA backend (cuda_backend.cpp) when asked for it.
#include "backend/backend.h"

#include <cctype>

#include "agentq/kernels_cuda.h"

namespace agentq {

#if AGENTQ_HAVE_CUDA
// cuda_backend.cpp
std::unique_ptr<forward_backend> make_cuda_backend(int32_t ordinal, std::shared_ptr<const gguf::file> file,
                                                   std::string* error);
#endif

bool parse_device(const std::string& text, device_spec* out, std::string* error) {
  auto all_digits = [](const std::string& s) {
    if (s.empty() || s.size() > 3) return false;
    for (char c : s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  if (text == "cpu") {
    *out = {device_spec::cpu, 0};
  } else if (text == "cuda") {
    *out = {device_spec::cuda, 0};
  } else if (text.rfind("cuda:", 0) == 0 && all_digits(text.substr(5))) {
    *out = {device_spec::cuda, std::stoi(text.substr(5))};
  } else {
    *error = "unknown device '" + text + "' (expected cpu, cuda or cuda:N)";
    return false;
  }
  return true;
}

namespace {

class cpu_backend final : public forward_backend {
 public:
  explicit cpu_backend(std::unique_ptr<model> m) : model_(std::move(m)) {}
  const model_hparams& hparams() const override { return model_->hparams(); }
  std::string device() const override { return "cpu"; }
  kv_dtype kv_type() const override { return kv_type_; }
  kv_layout kv_layout_for(int32_t block_size) const override {
    return model_->kv_layout_for(block_size, kv_type_, windowed_);
  }
  bool set_windowed_kv(bool on) override {
    windowed_ = on;
    return true;
  }
  bool set_kv_type(kv_dtype t, std::string*) override {
    kv_type_ = t;
    return true;
  }
  bool alloc_kv(int32_t block_size, int32_t n_blocks, std::string*) override {
    kv_ = std::make_unique<kv_store>(kv_layout_for(block_size), n_blocks);
    return true;
  }
  kv_memory& kv() override { return *kv_; }
  int32_t forward(std::span<const batch_seq> seqs, float* logits) override {
    return model_->forward(seqs, *kv_, logits);
  }

 private:
  std::unique_ptr<model> model_;
  std::unique_ptr<kv_store> kv_;
  kv_dtype kv_type_ = kv_dtype::f16;
  bool windowed_ = false;
};

}  // namespace

std::unique_ptr<forward_backend> forward_backend::create(const std::string& device,
                                                         std::shared_ptr<const gguf::file> file, int32_t n_threads,
                                                         std::string* error) {
  device_spec spec;
  if (!parse_device(device, &spec, error)) return nullptr;
  if (spec.kind == device_spec::cpu) {
    auto m = model::load(std::move(file), n_threads, error);
    if (!m) return nullptr;
    return std::make_unique<cpu_backend>(std::move(m));
  }
#if AGENTQ_HAVE_CUDA
  const int n = kernels::cuda::device_count();
  if (n == 0) {
    *error = "device '" + device + "': no CUDA device found (no driver, or no GPU visible to this process)";
    return nullptr;
  }
  if (spec.ordinal >= n) {
    *error = "device '" + device + "': CUDA device " + std::to_string(spec.ordinal) + " does not exist (" +
             std::to_string(n) + " visible)";
    return nullptr;
  }
  std::string err;
  auto b = make_cuda_backend(spec.ordinal, std::move(file), &err);
  if (!b) *error = "device '" + device + "': " + err;
  return b;
#else
  *error = "device '" + device + "': this build has no CUDA backend (configure with -DAGENTQ_CUDA=ON and nvcc)";
  return nullptr;
#endif
}

}  // namespace agentq
