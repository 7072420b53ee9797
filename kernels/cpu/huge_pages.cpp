// Anonymous memory on 2 MiB transparent huge pages: the model's weights and the bandwidth
// probe's buffer live in the same kind of memory, so matvec GB/s and the roofline compare.
#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "agentq/kernels.h"

namespace agentq::kernels {

namespace {
constexpr size_t k_huge = size_t(2) << 20;
size_t round_up(size_t n) {
  return (n + k_huge - 1) / k_huge * k_huge;
}
}  // namespace

bool huge_pages_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

void* alloc_huge(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t n = round_up(bytes);
  // Over-map by one huge page, then trim head and tail so the block starts on a 2 MiB boundary
  // (a THP needs an aligned 2 MiB range).
  void* m = mmap(nullptr, n + k_huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + k_huge - 1) / k_huge * k_huge;
  if (aligned > base) munmap(m, aligned - base);
  if (aligned + n < base + n + k_huge) munmap(reinterpret_cast<void*>(aligned + n), base + n + k_huge - (aligned + n));
  auto* p = reinterpret_cast<void*>(aligned);
  madvise(p, n, MADV_HUGEPAGE);  // NOTE: advisory; with THP "never" the memory is plain 4 KiB pages
  return p;
}

void free_huge(void* p, size_t bytes) {
  if (p) munmap(p, round_up(bytes));
}

}  // namespace agentq::kernels
