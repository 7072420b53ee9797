// Private to the kernels library: an always-on invariant check (like GGML_ASSERT).
#pragma once

#include <cstdio>
#include <cstdlib>

#define AGENTQ_KCHECK(cond)                                                              \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: kernels check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
