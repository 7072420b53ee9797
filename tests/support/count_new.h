// Counts the heap allocations of a test binary: replaces the global operator new/delete with ones
// that count each new (test::n_new()). For tests that check a path allocates nothing (or N times).
// NOTE: defines the replacement functions, so include it in exactly one file of a test binary (each
// tests/unit file is its own binary).
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace agentq::test {
inline std::atomic<long> g_n_new{0};
inline long n_new() {
  return g_n_new.load(std::memory_order_relaxed);
}
}  // namespace agentq::test

// GCC 12 takes the inlined free() below for a mismatch with operator new (-Wmismatched-new-delete):
// it is not one.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  agentq::test::g_n_new.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
