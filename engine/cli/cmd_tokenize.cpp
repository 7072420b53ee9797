// `agentq-engine tokenize`: print the token ids a model's tokenizer gives a
// text (no weights are loaded), for checking prompts and tokenizer behaviour.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"

namespace {

int usage(FILE* f) {
  std::fprintf(f,
               "usage: agentq-engine tokenize --model PATH (--text TEXT | --file PATH)\n"
               "                              [--add-special] [--parse-special] [--json | --pieces]\n"
               "  --add-special    add BOS/EOS as the model's metadata asks\n"
               "  --parse-special  text such as <|im_start|> becomes its special token\n"
               "  --json           print {\"ids\":[...]} (default: ids separated by spaces)\n"
               "  --pieces         print one line per token: id, then its text (escaped)\n");
  return f == stdout ? 0 : 2;
}

// JSON-style escaping, so a piece with a newline or invalid UTF-8 stays on its line.
std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int cmd_tokenize(int argc, char** argv) {
  const char *model = nullptr, *text = nullptr, *file = nullptr;
  bool add_special = false, parse_special = false, json = false, pieces = false;
  for (int i = 1; i < argc; i++) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(stdout);
    if (arg("--model")) model = argv[++i];
    else if (arg("--text")) text = argv[++i];
    else if (arg("--file")) file = argv[++i];
    else if (!std::strcmp(argv[i], "--add-special")) add_special = true;
    else if (!std::strcmp(argv[i], "--parse-special")) parse_special = true;
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--pieces")) pieces = true;
    else {
      std::fprintf(stderr, "tokenize: unknown or incomplete option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!model || (!text == !file)) return usage(stderr);

  std::string input;
  if (file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "tokenize: cannot read %s\n", file);
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    input = ss.str();
  } else {
    input = text;
  }

  using namespace agentq;
  std::string err;
  auto f = gguf::file::open(model, &err);
  if (!f) {
    std::fprintf(stderr, "tokenize: %s\n", err.c_str());
    return 1;
  }
  auto tok = tokenizer::load(*f, &err);
  if (!tok) {
    std::fprintf(stderr, "tokenize: %s: %s\n", model, err.c_str());
    return 1;
  }
  const auto ids = tok->encode(input, add_special, parse_special);

  std::string out;
  if (json) {
    out = "{\"ids\":[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]}\n";
  } else if (pieces) {
    for (token_id id : ids) out += std::to_string(id) + "\t\"" + escape(tok->token_to_piece(id, true)) + "\"\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

AGENTQ_REGISTER_COMMAND(tokenize, "print the token ids of a text (--json for {\"ids\":[...]})", cmd_tokenize);
