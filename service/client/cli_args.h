// Argument parsing for the agentq CLI: global options, a command (possibly two words,
// "keys create"), its positionals and options, validated against a per-command spec.
// In the library (not service/cli/) so unit tests can reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace agentq::client {

// Exit codes of the agentq CLI.
enum class exit_code : int {
  ok = 0,                // success; for jobs: completed
  error = 1,             // any other API error (4xx/5xx)
  usage = 2,
  unreachable = 3,       // server down / wrong AGENTQ_URL
  auth = 4,              // missing / rejected key
  job_failed = 10,
  job_cancelled = 11,
  job_incomplete = 12,
  job_requires_action = 13,
  timeout = 14,          // wait --timeout passed with the job still running
};
// The exit code for a job's final (or stopping) status.
exit_code exit_for_status(const std::string& status);
// A time argument (export --since): unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS[Z] (UTC), as unix ms.
std::optional<int64_t> parse_time_arg(const std::string& s);

struct cli_command {
  std::string name;                                         // "submit", "keys create", ...
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;  // "--model" -> values (flags: {""})
  bool json = false;                                        // --json
  std::string url;                                          // --url / AGENTQ_URL / default
  std::string api_key;                                      // --api-key / AGENTQ_API_KEY

  bool has(const std::string& opt) const { return options.count(opt) > 0; }
  std::string get(const std::string& opt, const std::string& fallback = {}) const;
  std::vector<std::string> all(const std::string& opt) const;
};

using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

// nullopt with *error (a usage message) on bad input. argv[0] is the program name.
std::optional<cli_command> parse_cli(const std::vector<std::string>& args, const env_lookup& env, std::string* error);

const char* cli_usage();

}  // namespace agentq::client
