// agentq CLI argument parsing: commands, options, environment, usage errors, exit codes.
#include <doctest/doctest.h>

#include <map>

#include "client/cli_args.h"

using namespace agentq::client;

namespace {
std::optional<cli_command> parse(std::vector<std::string> args, std::map<std::string, std::string> env = {},
                                 std::string* err = nullptr) {
  args.insert(args.begin(), "agentq");
  std::string e;
  auto r = parse_cli(
      args,
      [&](const std::string& k) -> std::optional<std::string> {
        auto it = env.find(k);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      err ? err : &e);
  return r;
}
}  // namespace

TEST_CASE("submit with flags, globals anywhere, environment defaults") {
  auto c = parse({"submit", "--model", "tiny", "--prompt", "hi", "--json", "--metadata", "a=1", "--metadata=b=2", "--wait"},
                 {{"AGENTQ_API_KEY", "aq_x"}});
  REQUIRE(c);
  CHECK(c->name == "submit");
  CHECK(c->json);
  CHECK(c->url == "http://127.0.0.1:8080");
  CHECK(c->api_key == "aq_x");
  CHECK(c->get("--model") == "tiny");
  CHECK(c->all("--metadata") == std::vector<std::string>{"a=1", "b=2"});
  CHECK(c->has("--wait"));
  auto d = parse({"--url", "http://h:1", "--api-key=k", "status", "job_1"}, {{"AGENTQ_URL", "http://env:2"}});
  REQUIRE(d);
  CHECK(d->url == "http://h:1");
  CHECK(d->api_key == "k");
  CHECK(d->positional == std::vector<std::string>{"job_1"});
  CHECK(parse({"status", "j"}, {{"AGENTQ_URL", "http://env:2"}})->url == "http://env:2");
}

TEST_CASE("two-word key commands") {
  auto c = parse({"keys", "create", "--tenant", "acme", "--data-dir", "/tmp/x"});
  REQUIRE(c);
  CHECK(c->name == "keys create");
  CHECK(c->get("--tenant") == "acme");
  CHECK(c->get("--data-dir") == "/tmp/x");
  CHECK(parse({"keys", "revoke", "key_1"})->positional[0] == "key_1");
  CHECK(parse({"keys", "list"}));
}

TEST_CASE("usage errors") {
  std::string err;
  CHECK_FALSE(parse({}, {}, &err));
  CHECK_FALSE(parse({"frobnicate"}, {}, &err));
  CHECK(err.find("unknown command") != std::string::npos);
  CHECK_FALSE(parse({"status"}, {}, &err));
  CHECK_FALSE(parse({"status", "a", "b"}, {}, &err));
  CHECK_FALSE(parse({"submit", "--prompt", "x"}, {}, &err));  // no model
  CHECK_FALSE(parse({"submit", "f.json", "--model", "m"}, {}, &err));
  CHECK_FALSE(parse({"submit", "--model"}, {}, &err));
  CHECK_FALSE(parse({"status", "j", "--bogus"}, {}, &err));
  CHECK_FALSE(parse({"wait", "j", "--timeout", "soon"}, {}, &err));
  CHECK_FALSE(parse({"tool-outputs", "j", "--call-id", "c"}, {}, &err));
  CHECK_FALSE(parse({"tool-outputs", "j", "f.json", "--output", "x"}, {}, &err));
  CHECK_FALSE(parse({"keys", "create"}, {}, &err));
  CHECK_FALSE(parse({"keys"}, {}, &err));
  CHECK_FALSE(parse({"list", "--metadata", "novalue"}, {}, &err));
  CHECK_FALSE(parse({"events", "j", "--follow=yes"}, {}, &err));
  CHECK(parse({"tool-outputs", "j", "--call-id", "c", "--output", "42"}));
  CHECK(parse({"tool-outputs", "j", "outputs.json"}));
  CHECK(parse({"events", "j", "--follow"}));
  CHECK(parse({"help"})->name == "help");
}

TEST_CASE("exit codes by job status") {
  CHECK(exit_for_status("completed") == exit_code::ok);
  CHECK(int(exit_for_status("failed")) == 10);
  CHECK(int(exit_for_status("cancelled")) == 11);
  CHECK(int(exit_for_status("incomplete")) == 12);
  CHECK(int(exit_for_status("requires_action")) == 13);
  CHECK(int(exit_code::usage) == 2);
  CHECK(int(exit_code::unreachable) == 3);
  CHECK(int(exit_code::auth) == 4);
}

TEST_CASE("submit's request-field flags: --max-output-tokens, --max-tokens-per-turn, --stop") {
  auto c = parse({"submit", "--model", "m", "--prompt", "p", "--max-output-tokens", "64", "--max-tokens-per-turn", "32",
                  "--stop", ".", "--stop", "\n"});
  REQUIRE(c);
  CHECK(c->get("--max-output-tokens") == "64");
  CHECK(c->get("--max-tokens-per-turn") == "32");
  CHECK(c->all("--stop") == std::vector<std::string>{".", "\n"});
  std::string err;
  CHECK_FALSE(parse({"submit", "--model", "m", "--prompt", "p", "--max-output-tokens", "1.5"}, {}, &err));
  CHECK(err == "--max-output-tokens must be a whole number");
  CHECK_FALSE(parse({"submit", "--model", "m", "--prompt", "p", "--max-tokens-per-turn", "99999999999"}, {}, &err));
  CHECK_FALSE(parse({"submit", "--model", "m", "--prompt", "p", "--stop", ""}, {}, &err));
  CHECK(err == "--stop takes a non-empty string");
  CHECK_FALSE(parse({"submit", "--model", "m", "--prompt", "p", "--timeout", "1.2.3"}, {}, &err));
  // list's --after is the API's opaque cursor; events' is an event id
  CHECK(parse({"list", "--after", "job_abc"}));
  CHECK_FALSE(parse({"events", "job_1", "--after", "x"}, {}, &err));
}

TEST_CASE("delete, export and their time argument (issue 33)") {
  CHECK(parse({"delete", "job_1"})->positional[0] == "job_1");
  CHECK_FALSE(parse({"delete"}));
  auto e = parse({"export", "--since", "2024-01-02", "--format", "jsonl"});
  REQUIRE(e);
  CHECK(e->get("--since") == "2024-01-02");
  CHECK_FALSE(parse({"export", "--format", "csv"}));
  CHECK_FALSE(parse({"export", "--since", "yesterday"}));
  CHECK(parse({"keys", "create", "--tenant", "a", "--retention-days", "7"}));
  CHECK_FALSE(parse({"keys", "create", "--tenant", "a", "--retention-days", "-1"}));
  CHECK(parse_time_arg("0") == 0);
  CHECK(parse_time_arg("1700000000") == 1700000000000LL);
  CHECK(parse_time_arg("1970-01-02") == 86400000LL);
  CHECK(parse_time_arg("2024-03-01T12:30:15Z") == 1709296215000LL);
  CHECK(parse_time_arg("2024-03-01T12:30:15") == 1709296215000LL);
  CHECK_FALSE(parse_time_arg("2024-13-01"));
  CHECK_FALSE(parse_time_arg("2024-03-01T12:30"));
  CHECK_FALSE(parse_time_arg(""));
}
