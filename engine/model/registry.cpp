// The architecture registry (registry.h): one line per family file under engine/model/.
// NOTE: an explicit table, not self-registering statics: the engine is a static library,
// and the linker drops objects nothing references, registrations included.
#include "model/registry.h"

namespace agentq {

bool build_llama(model_loader& ld);     // llama.cpp: llama, Mistral, SmolLM(2)
bool build_qwen2(model_loader& ld);     // llama.cpp
bool build_qwen3(model_loader& ld);     // qwen3.cpp
bool build_qwen3moe(model_loader& ld);  // qwen3moe.cpp
bool build_smollm3(model_loader& ld);   // smollm3.cpp
bool build_gemma2(model_loader& ld);    // gemma2.cpp
bool build_gemma3(model_loader& ld);    // gemma3.cpp
bool build_phi3(model_loader& ld);      // phi3.cpp
bool build_gpt_oss(model_loader& ld);   // gpt_oss.cpp

namespace {
const arch_entry k_archs[] = {
    {"llama", build_llama, true},
    {"qwen2", build_qwen2, true},
    {"qwen3", build_qwen3, true},
    {"qwen3moe", build_qwen3moe, true},
    {"smollm3", build_smollm3, true},
    {"gemma2", build_gemma2, true},
    {"gemma3", build_gemma3, true},
    {"phi3", build_phi3, true},
    {"gpt-oss", build_gpt_oss, true},
};
}  // namespace

std::span<const arch_entry> architectures() { return k_archs; }

const arch_entry* find_architecture(std::string_view name) {
  for (const auto& a : k_archs)
    if (name == a.name) return &a;
  return nullptr;
}

std::string architecture_names() {
  std::string s;
  for (const auto& a : k_archs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace agentq
