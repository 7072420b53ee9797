// Writes ggml's own quantized blocks and dequantized values for the block formats the
// engine reads (tests/unit/engine/data/ggml_blocks.bin, read by test_kernels_formats).
// Built against llama.cpp's libggml-base by scripts/dev/ggml_blocks.sh; never part of the build.
// Per type: u32 ggml type id, u32 n, f32 input[n], u32 n_bytes, bytes (ggml_quantize_chunk with
// no importance matrix: what llama-quantize writes), f32 dequantized[n] (ggml's to_float).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
// Box-Muller normals, with a few outliers and a zero block so edge paths run too.
static float sample(int64_t i) {
  if (i >= 64 && i < 96) return 0.0f;
  const double g = sqrt(-2 * log(uniform01())) * cos(2 * M_PI * uniform01());
  return (float)(g * (i % 97 == 5 ? 8.0 : 1.0) * 0.05);
}

static void put(FILE* f, const void* p, size_t n) {
  if (fwrite(p, 1, n, f) != n) { perror("write"); exit(1); }
}

int main(int argc, char** argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s OUT.bin\n", argv[0]); return 2; }
  const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_NL,
                                  GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
                                  GGML_TYPE_Q6_K};
  const int n_types = sizeof(types) / sizeof(types[0]);
  const int64_t n = 512;
  FILE* f = fopen(argv[1], "wb");
  if (!f) { perror(argv[1]); return 1; }
  put(f, "AQGB", 4);
  const uint32_t count = (uint32_t)n_types;
  put(f, &count, 4);
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  void* q = malloc(n * 4);
  for (int k = 0; k < n_types; ++k) {
    for (int64_t i = 0; i < n; ++i) x[i] = sample(i);
    ggml_quantize_init(types[k]);
    const size_t nb = ggml_quantize_chunk(types[k], x, q, 0, 1, n, NULL);
    ggml_get_type_traits(types[k])->to_float(q, y, n);
    const uint32_t id = (uint32_t)types[k], nn = (uint32_t)n, nbytes = (uint32_t)nb;
    put(f, &id, 4);
    put(f, &nn, 4);
    put(f, x, n * sizeof(float));
    put(f, &nbytes, 4);
    put(f, q, nb);
    put(f, y, n * sizeof(float));
  }
  fclose(f);
  ggml_quantize_free();
  return 0;
}
