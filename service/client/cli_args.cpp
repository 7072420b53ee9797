// agentq CLI argument parsing (see cli_args.h).
#include "client/cli_args.h"

#include <cstdio>
#include <set>
#include <string_view>

namespace agentq::client {

namespace {

struct command_spec {
  const char* name;
  int min_pos, max_pos;
  std::set<std::string> valued;  // options taking a value
  std::set<std::string> flags;   // options without one
};

const std::vector<command_spec>& specs() {
  static const std::vector<command_spec> k = {
      {"submit", 0, 1, {"--model", "--system", "--prompt", "--tools", "--webhook", "--metadata", "--idempotency-key",
                        "--priority", "--max-turns", "--max-output-tokens", "--max-tokens-per-turn", "--stop",
                        "--timeout"}, {"--wait"}},
      {"status", 1, 1, {}, {"--timeline"}},
      {"wait", 1, 1, {"--timeout"}, {}},
      {"cancel", 1, 1, {}, {}},
      {"delete", 1, 1, {}, {}},
      {"export", 0, 0, {"--since", "--format", "--limit"}, {}},
      {"list", 0, 0, {"--status", "--limit", "--metadata", "--after"}, {}},
      {"events", 1, 1, {"--after"}, {"--follow"}},
      {"tool-outputs", 1, 2, {"--call-id", "--output"}, {}},
      {"webhooks", 1, 1, {}, {}},
      {"models", 0, 0, {}, {}},
      {"keys create", 0, 0, {"--tenant", "--data-dir", "--retention-days"}, {"--admin"}},
      {"keys list", 0, 0, {"--data-dir", "--tenant"}, {}},
      {"keys revoke", 1, 1, {"--data-dir"}, {}},
      {"keys rotate-secret", 1, 1, {"--data-dir"}, {}},
  };
  return k;
}

}  // namespace

std::string cli_command::get(const std::string& opt, const std::string& fallback) const {
  auto it = options.find(opt);
  return it == options.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> cli_command::all(const std::string& opt) const {
  auto it = options.find(opt);
  return it == options.end() ? std::vector<std::string>{} : it->second;
}

std::optional<int64_t> parse_time_arg(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    if (s.size() > 12) return std::nullopt;
    return std::stoll(s) * 1000;
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char tail = 0;
  int n = std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &tail);
  bool date_only = s.size() == 10 && n == 3;
  bool full = (n == 6 && s.size() == 19) || (n == 7 && tail == 'Z' && s.size() == 20);
  if (!date_only && !full) return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970) return std::nullopt;
  // days since the epoch (civil calendar, UTC)
  int yy = y - (mo <= 2);
  int era = yy / 400, yoe = yy - era * 400;
  int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = int64_t(era) * 146097 + doe - 719468;
  return ((days * 24 + h) * 60 + mi) * 60000LL + sec * 1000LL;
}

exit_code exit_for_status(const std::string& status) {
  if (status == "completed") return exit_code::ok;
  if (status == "failed") return exit_code::job_failed;
  if (status == "cancelled") return exit_code::job_cancelled;
  if (status == "incomplete") return exit_code::job_incomplete;
  if (status == "requires_action") return exit_code::job_requires_action;
  return exit_code::timeout;
}

const char* cli_usage() {
  return R"(usage: agentq [--url URL] [--api-key KEY] [--json] COMMAND ...
commands:
  submit FILE.json [--wait]                       submit a job request (JSON body of POST /v1/jobs)
  submit --model M --prompt TEXT [--system TEXT] [--tools FILE] [--webhook URL]
         [--metadata K=V]... [--priority P] [--max-turns N] [--max-output-tokens N]
         [--max-tokens-per-turn N] [--stop TEXT]... [--idempotency-key K] [--wait] [--timeout S]
  status ID [--timeline]                          the job (status, turns, usage, output); --timeline: where
                                                  its time went (queue, prefill, decode, tools, webhooks) as a chart
  wait ID [--timeout S]                           poll until the job stops; exit code = its outcome
  cancel ID
  delete ID                                       delete the job's content (a running job is cancelled first)
  export [--since T] [--format jsonl] [--limit N] every job created at or after T (unix seconds or
                                                  YYYY-MM-DD[THH:MM:SSZ]) with its transcript, one JSON a line
  list [--status S] [--limit N] [--metadata K=V] [--after CURSOR]
  events ID [--follow] [--after N]                the job's events; --follow: live until it ends, exit = outcome
  tool-outputs ID --call-id X --output TEXT       answer a pending client-side tool call
  tool-outputs ID FILE.json                       {"tool_outputs":[{"tool_call_id","output"}]}
  webhooks ID                                     webhook deliveries and attempts of a job
  models
  keys create --tenant NAME [--admin] [--retention-days N] [--data-dir DIR]
  keys list [--tenant NAME] [--data-dir DIR]
  keys revoke KEY_ID [--data-dir DIR]
  keys rotate-secret KEY_ID [--data-dir DIR]      (--data-dir: work on the database directly)
environment: AGENTQ_URL (default http://127.0.0.1:8080), AGENTQ_API_KEY
exit codes: 0 completed/ok, 1 API error, 2 usage, 3 server unreachable, 4 auth,
            10 failed, 11 cancelled, 12 incomplete, 13 requires_action, 14 wait timed out
)";
}

std::optional<cli_command> parse_cli(const std::vector<std::string>& args, const env_lookup& env, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<cli_command> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  cli_command cmd;
  cmd.url = env("AGENTQ_URL").value_or("http://127.0.0.1:8080");
  cmd.api_key = env("AGENTQ_API_KEY").value_or("");
  std::vector<std::string> rest;
  // global options may come anywhere
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      cmd.json = true;
    } else if (a == "--url" || a == "--api-key") {
      if (i + 1 >= args.size()) return fail(a + " needs a value");
      (a == "--url" ? cmd.url : cmd.api_key) = args[++i];
    } else if (a.starts_with("--url=")) {
      cmd.url = a.substr(6);
    } else if (a.starts_with("--api-key=")) {
      cmd.api_key = a.substr(10);
    } else {
      rest.push_back(a);
    }
  }
  if (rest.empty()) return fail("no command given");
  if (rest[0] == "help" || rest[0] == "--help" || rest[0] == "-h") {
    cmd.name = "help";
    return cmd;
  }
  size_t idx = 1;
  std::string name = rest[0];
  if (name == "keys") {
    if (rest.size() < 2) return fail("keys needs a subcommand: create, list, revoke, rotate-secret");
    name += " " + rest[1];
    idx = 2;
  }
  const command_spec* spec = nullptr;
  for (const auto& s : specs())
    if (s.name == name) spec = &s;
  if (!spec) return fail("unknown command '" + name + "'");
  cmd.name = name;
  for (; idx < rest.size(); ++idx) {
    std::string a = rest[idx];
    if (a.starts_with("--")) {
      std::string value;
      bool inline_value = false;
      if (size_t eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      if (spec->flags.count(a)) {
        if (inline_value) return fail(a + " takes no value");
        cmd.options[a].push_back("");
      } else if (spec->valued.count(a)) {
        if (!inline_value) {
          if (idx + 1 >= rest.size()) return fail(a + " needs a value");
          value = rest[++idx];
        }
        cmd.options[a].push_back(value);
      } else {
        return fail("unknown option " + a + " for '" + name + "'");
      }
    } else {
      cmd.positional.push_back(a);
    }
  }
  if (int(cmd.positional.size()) < spec->min_pos || int(cmd.positional.size()) > spec->max_pos)
    return fail("'" + name + "' takes " +
                (spec->min_pos == spec->max_pos ? std::to_string(spec->min_pos)
                                                : std::to_string(spec->min_pos) + "-" + std::to_string(spec->max_pos)) +
                " argument(s)");
  // command-specific rules
  if (name == "submit" && cmd.positional.empty() && (!cmd.has("--model") || !cmd.has("--prompt")))
    return fail("submit needs a FILE.json, or --model and --prompt");
  if (name == "submit" && !cmd.positional.empty() && (cmd.has("--model") || cmd.has("--prompt") || cmd.has("--system")))
    return fail("submit takes a FILE.json or --model/--prompt flags, not both");
  if (name == "tool-outputs") {
    bool inline_output = cmd.has("--call-id") || cmd.has("--output");
    if (cmd.positional.size() == 2 && inline_output) return fail("tool-outputs takes FILE.json or --call-id/--output, not both");
    if (cmd.positional.size() == 1 && (!cmd.has("--call-id") || !cmd.has("--output")))
      return fail("tool-outputs needs --call-id X --output TEXT, or a FILE.json");
  }
  if (name == "keys create" && !cmd.has("--tenant")) return fail("keys create needs --tenant NAME");
  for (const auto& v : cmd.all("--retention-days"))
    if (v.empty() || v.size() > 5 || v.find_first_not_of("0123456789") != std::string::npos)
      return fail("--retention-days must be a whole number of days");
  for (const auto& v : cmd.all("--format"))
    if (v != "jsonl") return fail("--format must be jsonl");
  for (const auto& v : cmd.all("--since"))
    if (!parse_time_arg(v)) return fail("--since must be unix seconds or YYYY-MM-DD[THH:MM:SS[Z]]");
  for (const auto& v : cmd.all("--timeout"))
    if (v.empty() || v.find_first_not_of("0123456789.") != std::string::npos || v.find('.') != v.rfind('.'))
      return fail("--timeout must be a number");
  // NOTE: at most 9 digits, so the value always fits the int the request field takes.
  // (list's --after is an opaque cursor, events' an event id)
  for (const char* opt : {"--limit", "--max-turns", "--max-output-tokens", "--max-tokens-per-turn", "--after"}) {
    if (std::string_view(opt) == "--after" && name != "events") continue;
    for (const auto& v : cmd.all(opt)) {
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        return fail(std::string(opt) + " must be a whole number");
    }
  }
  if (cmd.all("--stop").size() > 8) return fail("--stop may be given at most 8 times");
  for (const auto& v : cmd.all("--stop"))
    if (v.empty()) return fail("--stop takes a non-empty string");
  for (const auto& kv : cmd.all("--metadata"))
    if (kv.find('=') == std::string::npos || kv.front() == '=') return fail("--metadata takes KEY=VALUE");
  if (cmd.url.find("://") == std::string::npos) return fail("the server URL must look like http://HOST:PORT");
  return cmd;
}

}  // namespace agentq::client
