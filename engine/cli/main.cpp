// agentq-engine: the engine's command-line front end. Dispatches
// `agentq-engine <subcommand> ...` to the commands registered in cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/commands.h"

namespace agentq::cli {

std::vector<command>& commands() {
  static std::vector<command> all;
  return all;
}

}  // namespace agentq::cli

static void print_usage(FILE* out) {
  auto cmds = agentq::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(out, "usage: agentq-engine <command> [options]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`agentq-engine <command> --help` for a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : agentq::cli::commands()) {
    if (!std::strcmp(c.name, argv[1])) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "agentq-engine: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
