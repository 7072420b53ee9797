// `agentq-engine info`: what a GGUF model is — architecture, shapes, weight types,
// tokenizer — after loading it as generate would; a file it cannot load fails
// with the reason and exit code 1.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace agentq;

int usage(FILE* f) {
  std::fprintf(f, "usage: agentq-engine info --model PATH\n");
  return f == stdout ? 0 : 2;
}

std::string token_desc(const tokenizer& tok, token_id id) {
  if (id < 0) return "none";
  return std::to_string(id) + " '" + tok.token_text(id) + "'";
}

int cmd_info(int argc, char** argv) {
  const char* model_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(stdout);
    if ((!std::strcmp(argv[i], "--model") || !std::strcmp(argv[i], "-m")) && i + 1 < argc) model_path = argv[++i];
    else { std::fprintf(stderr, "info: unknown option '%s'\n", argv[i]); return usage(stderr); }
  }
  if (!model_path) return usage(stderr);

  std::string err;
  std::shared_ptr<const gguf::file> file = gguf::file::open(model_path, &err);
  if (!file) { std::fprintf(stderr, "info: cannot load %s: %s\n", model_path, err.c_str()); return 1; }
  auto mdl = model::load(file, 1, &err, model::weights::validate);
  if (!mdl) { std::fprintf(stderr, "info: cannot load %s: %s\n", model_path, err.c_str()); return 1; }
  auto tok = tokenizer::load(*file, &err);
  if (!tok) { std::fprintf(stderr, "info: cannot load the tokenizer of %s: %s\n", model_path, err.c_str()); return 1; }

  const model_hparams& hp = mdl->hparams();
  std::printf("file:          %s (GGUF v%u, %.1f MiB)\n", model_path, file->version(), double(file->size()) / (1 << 20));
  if (auto name = file->get_string("general.name")) std::printf("name:          %.*s\n", int(name->size()), name->data());
  std::printf("architecture:  %s\n", hp.arch.c_str());
  std::printf("layers:        %d\n", hp.n_layer);
  std::printf("embedding:     %d\n", hp.n_embd);
  std::printf("feed-forward:  %d\n", hp.n_ff);
  std::printf("heads:         %d (kv %d, head dim %d)\n", hp.n_head, hp.n_head_kv, hp.head_dim);
  std::printf("context:       %d\n", hp.n_ctx);
  {
    // K and V of every layer per token of context, as the CPU stores them (F16) and as F32.
    const double f16 = double(mdl->kv_layout_for(16).block_bytes()) / 16;
    std::printf("kv cache:      %.1f KiB per token (f16, the cpu default; f32 %.1f KiB); %.0f MiB for the full context\n",
                f16 / 1024, 2 * f16 / 1024, f16 * hp.n_ctx / (1 << 20));
    // Sliding-window layers hold only the blocks their window reaches (windowed KV, the engine's
    // default on the CPU; 64-token blocks): a sequence's K/V at 4k and 32k tokens and at the full
    // context, every layer whole vs windowed.
    const kv_layout full = mdl->kv_layout_for(64), win = mdl->kv_layout_for(64, kv_dtype::f16, true);
    if (win.window > 0) {
      std::printf("sliding window: %d of %d layers (window %d) hold only the window's blocks:\n", win.n_layer_windowed(),
                  hp.n_layer, win.window);
      for (int32_t n : {4096, 32768, hp.n_ctx})
        std::printf("  kv at %6d tokens: %8.1f MiB windowed, %8.1f MiB with every layer whole\n", n,
                    double(win.seq_bytes(n)) / (1 << 20), double(full.seq_bytes(n)) / (1 << 20));
    }
  }
  std::printf("rope:          %s, base %g, %d dims, scale %g\n", hp.rope_neox ? "neox" : "normal", hp.rope_base, hp.n_rot,
              hp.rope_scale);
  std::printf("rms eps:       %g\n", hp.rms_eps);
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // type -> (tensors, bytes)
  uint64_t n_params = 0, n_bytes = 0;
  for (const auto& t : file->tensors()) {
    auto& e = by_type[gguf::name_of(t.type)];
    ++e.first;
    e.second += t.n_bytes;
    n_params += t.n_elements;
    n_bytes += t.n_bytes;
  }
  std::printf("parameters:    %.2f M (%.1f MiB of weights)\n", double(n_params) / 1e6, double(n_bytes) / (1 << 20));
  std::printf("weight types: ");
  for (const auto& [name, e] : by_type) std::printf(" %s x%d (%.1f MiB)", name.c_str(), e.first, double(e.second) / (1 << 20));
  std::printf("\n");
  auto tok_model = file->get_string("tokenizer.ggml.model");
  std::printf("tokenizer:     %.*s (%s), %d tokens\n", tok_model ? int(tok_model->size()) : 1, tok_model ? tok_model->data() : "?",
              tok->kind() == vocab_kind::spm ? "SentencePiece" : "byte-level BPE", tok->n_vocab());
  std::printf("special:       bos %s%s, eos %s, eot %s, unk %s\n", token_desc(*tok, tok->bos()).c_str(),
              tok->add_bos() ? " (added)" : "", token_desc(*tok, tok->eos()).c_str(), token_desc(*tok, tok->eot()).c_str(),
              token_desc(*tok, tok->unk()).c_str());
  std::printf("end of gen:   ");
  for (token_id id : tok->eog_ids()) std::printf(" %s", token_desc(*tok, id).c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(info, "describe a model: architecture, shapes, weight types, tokenizer", cmd_info);
