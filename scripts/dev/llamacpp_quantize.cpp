// llamacpp_quantize: llama.cpp's llama_model_quantize with its default parameters, which is what
// `llama-quantize IN OUT PRESET N` runs without flags, without building llama.cpp's common library.
//   llamacpp_quantize IN.gguf OUT.gguf FTYPE_NUMBER [THREADS]   (FTYPE: llama.h's LLAMA_FTYPE_MOSTLY_*)
// Built outside the repository by scripts/dev/llamacpp_ref.sh llamacpp_quantize; never linked into agentq.
#include <llama.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llamacpp_quantize IN.gguf OUT.gguf FTYPE_NUMBER [THREADS]\n");
    return 2;
  }
  llama_backend_init();
  llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = static_cast<llama_ftype>(std::atoi(argv[3]));
  p.nthread = argc > 4 ? std::atoi(argv[4]) : 1;
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
  llama_backend_free();
  if (rc != 0) std::fprintf(stderr, "llamacpp_quantize: failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
