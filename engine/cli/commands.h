// Subcommands of the agentq-engine binary. Each cmd_*.cpp registers itself
// with AGENTQ_REGISTER_COMMAND, so adding a subcommand touches no other file;
// main.cpp looks the name up and runs it.
#pragma once

#include <vector>

namespace agentq::cli {

// argv[0] is the subcommand name; returns the process exit code.
using command_fn = int (*)(int argc, char** argv);

struct command {
  const char* name;     // "generate"
  const char* summary;  // one line for `agentq-engine --help`
  command_fn run;
};

// Every registered command (registration order is unspecified; main sorts by name).
std::vector<command>& commands();

struct command_registrar {
  command_registrar(const char* name, const char* summary, command_fn run) {
    commands().push_back({name, summary, run});
  }
};

}  // namespace agentq::cli

// Put once at namespace scope in a cmd_*.cpp: AGENTQ_REGISTER_COMMAND(generate, "...", cmd_generate)
#define AGENTQ_REGISTER_COMMAND(name, summary, fn) \
  static ::agentq::cli::command_registrar agentq_command_registrar_##name(#name, summary, fn)
