// agentq-engine header IN OUT: write a model's GGUF header alone (metadata + tensor table, no
// tensor data) — what an agentqd --role api control plane needs of a model (docs/deploy.md).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "agentq/model_header.h"
#include "cli/commands.h"

namespace {

int cmd_header(int argc, char** argv) {
  if (argc != 3 || !std::strcmp(argv[1], "--help")) {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: agentq-engine header MODEL.gguf OUT.gguf\n"
                 "  writes MODEL's header alone (tokenizer, chat template, hyper-parameters, tensor table; no\n"
                 "  weights): agentqd --role api --model OUT.gguf validates requests as with the whole file\n");
    return argc == 2 ? 0 : 2;
  }
  std::string err;
  auto h = agentq::model_header::open(argv[1], "", &err);
  if (!h) {
    std::fprintf(stderr, "agentq-engine header: %s\n", err.c_str());
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out.write(h->bytes().data(), std::streamsize(h->bytes().size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "agentq-engine header: cannot write '%s'\n", argv[2]);
    return 1;
  }
  std::printf("wrote %s: the header of %s (%zu bytes; %s, n_ctx %d, chat family %s)\n", argv[2], argv[1],
              h->bytes().size(), h->model().arch.c_str(), h->model().n_ctx, h->model().chat_family.c_str());
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(header, "write a model's GGUF header alone (for a control plane: agentqd --role api)",
                        cmd_header);
