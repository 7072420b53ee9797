// `agentq-engine render`: print the prompt a conversation renders to, for
// checking chat templates by eye (no weights are loaded).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "chat/chat.h"
#include "chat/messages_json.h"
#include "cli/commands.h"
#include "gguf/reader.h"

namespace {

bool slurp(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

int usage(FILE* f) {
  std::fprintf(f,
               "usage: agentq-engine render [--model PATH] --messages FILE [--tools FILE] [--family NAME]\n"
               "                            [--no-generation-prompt]\n"
               "  --model    GGUF whose tokenizer.chat_template picks the family (none: plain; unmatched: choose --family)\n"
               "  --messages OpenAI-style messages JSON array\n"
               "  --tools    OpenAI-style tools JSON array\n"
               "  --family   plain|chatml|hermes|qwen3|llama3|mistral|phi3|smollm3|gemma|deepseek-r1|deepseek-r1-distill-qwen\n"
               "             (overrides detection)\n");
  return f == stdout ? 0 : 2;
}

int cmd_render(int argc, char** argv) {
  const char *model = nullptr, *messages_path = nullptr, *tools_path = nullptr, *family_name = nullptr;
  bool gen = true;
  for (int i = 1; i < argc; i++) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(stdout);
    if (arg("--model")) model = argv[++i];
    else if (arg("--messages")) messages_path = argv[++i];
    else if (arg("--tools")) tools_path = argv[++i];
    else if (arg("--family")) family_name = argv[++i];
    else if (!std::strcmp(argv[i], "--no-generation-prompt")) gen = false;
    else {
      std::fprintf(stderr, "render: unknown or incomplete option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!messages_path) return usage(stderr);
  using namespace agentq;
  chat::template_family family = chat::template_family::plain;
  if (model) {
    std::string err;
    auto f = gguf::file::open(model, &err);
    if (!f) {
      std::fprintf(stderr, "render: %s\n", err.c_str());
      return 1;
    }
    if (auto t = f->get_string("tokenizer.chat_template")) {
      auto detected = chat::detect_family(*t);
      if (!detected && !family_name) {
        std::fprintf(stderr, "render: %s has a chat template no family matches; choose one with --family NAME\n", model);
        return 2;
      }
      if (detected) family = *detected;
    }
  }
  if (family_name) {
    auto f = chat::family_from_name(family_name);
    if (!f) {
      std::fprintf(stderr, "render: unknown family '%s'\n", family_name);
      return 2;
    }
    family = *f;
  }
  std::string text, err;
  if (!slurp(messages_path, &text)) {
    std::fprintf(stderr, "render: cannot read %s\n", messages_path);
    return 1;
  }
  auto messages = chat::messages_from_json(text, &err);
  if (!messages) {
    std::fprintf(stderr, "render: %s\n", err.c_str());
    return 1;
  }
  std::vector<tool_def> tools;
  if (tools_path) {
    if (!slurp(tools_path, &text)) {
      std::fprintf(stderr, "render: cannot read %s\n", tools_path);
      return 1;
    }
    auto t = chat::tools_from_json(text, &err);
    if (!t) {
      std::fprintf(stderr, "render: %s\n", err.c_str());
      return 1;
    }
    tools = std::move(*t);
  }
  std::string out = chat::render(family, *messages, tools, gen);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(render, "print the prompt a conversation renders to (chat templates)", cmd_render);
