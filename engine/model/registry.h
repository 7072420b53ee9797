// The architecture registry: GGUF general.architecture -> the file under engine/model/
// that describes that family. Adding a family is one <arch>.cpp and one line in registry.cpp.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace agentq {

class model_loader;

struct arch_entry {
  const char* name;                    // general.architecture
  bool (*build)(model_loader& ld);     // fills ld.desc(): hyper-parameters, options, tensors
  bool cuda = false;                   // the CUDA backend runs it (backend/cuda_forward.cpp)
};

std::span<const arch_entry> architectures();
// nullptr when name is not registered.
const arch_entry* find_architecture(std::string_view name);
// "llama, qwen2, ..." for error messages.
std::string architecture_names();

}  // namespace agentq
