// agentq: the command-line client. Talks to agentqd over REST (AGENTQ_URL, AGENTQ_API_KEY);
// `keys ... --data-dir DIR` works on the database directly. Exit codes: client/cli_args.h.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "auth/keys.h"
#include "client/cli_args.h"
#include "client/timeline_chart.h"
#include "http/message.h"
#include "net/http_client.h"
#include "store/store.h"

using namespace agentq;
using client::exit_code;
using json = nlohmann::json;

namespace {

// Under --json every failure is also a JSON object on stdout: {"error":{"type","message"}}.
void print_error_json(const std::string& type, const std::string& message) {
  std::printf("%s\n", json{{"error", {{"type", type}, {"message", message}}}}.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

struct api_reply {
  int status = 0;  // 0 = transport failure (already reported)
  json body;
};

class api_client {
 public:
  explicit api_client(const client::cli_command& cmd)
      : cmd_(cmd), http_(net::ssrf_guard(*net::parse_cidr_list("0.0.0.0/0,::/0", nullptr))) {
    base_ = cmd.url;
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
  }

  // One call; on transport or auth failure prints a helpful message and sets exit_.
  api_reply call(const std::string& method, const std::string& path, const json* body = nullptr,
                 std::vector<std::pair<std::string, std::string>> headers = {}) {
    net::http_request req;
    req.method = method;
    req.url = base_ + path;
    req.timeout = std::chrono::seconds(30);
    req.max_response_bytes = 64 << 20;
    req.headers = std::move(headers);
    if (!cmd_.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + cmd_.api_key);
    if (body) {
      req.body = body->dump();
      req.headers.emplace_back("Content-Type", "application/json");
    }
    auto res = http_.send(req);
    if (!res.ok()) {
      if (cmd_.json) print_error_json("unreachable", "cannot reach the agentq server at " + base_ + ": " + res.message);
      std::fprintf(stderr,
                   "agentq: cannot reach the agentq server at %s (%s).\n"
                   "  Is agentqd running? Start it with `agentqd`, or point AGENTQ_URL / --url at it.\n",
                   base_.c_str(), res.message.c_str());
      exit_ = exit_code::unreachable;
      return {};
    }
    api_reply out;
    out.status = res.response.status;
    out.body = json::parse(res.response.body, nullptr, false);
    if (out.status >= 400 && cmd_.json) {
      // the server's own {"error":{...}} body; anything else (a proxy's page) wrapped as one
      if (out.body.is_object() && out.body.contains("error")) std::printf("%s\n", out.body.dump().c_str());
      else print_error_json("http_" + std::to_string(out.status), res.response.body);
    }
    if (out.status == 401) {
      std::fprintf(stderr, "agentq: the server rejected the API key%s.\n"
                           "  Set AGENTQ_API_KEY (or --api-key) to a key from `agentq keys create` or agentqd's first-run output.\n",
                   cmd_.api_key.empty() ? " (none was given)" : "");
      exit_ = exit_code::auth;
      out.status = 0;
    } else if (out.status >= 400) {
      std::string msg = out.body.is_object() && out.body.contains("error")
                            ? out.body["error"].value("message", res.response.body)
                            : res.response.body;
      std::string param = out.body.is_object() && out.body.contains("error") && out.body["error"]["param"].is_string()
                              ? " (param: " + out.body["error"]["param"].get<std::string>() + ")"
                              : "";
      std::fprintf(stderr, "agentq: HTTP %d: %s%s\n", out.status, msg.c_str(), param.c_str());
      exit_ = exit_code::error;
      out.status = 0;
    }
    return out;
  }

  exit_code exit() const { return exit_; }

 private:
  const client::cli_command& cmd_;
  net::http_client http_;
  std::string base_;
  exit_code exit_ = exit_code::ok;
};

std::string read_file(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = bool(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string url_encode(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

void print_json(const json& j) { std::printf("%s\n", j.dump(2).c_str()); }

void print_job_summary(const json& job) {
  const json& u = job.value("usage", json::object());
  std::printf("%s  %s  model=%s  turns=%d  tokens=%lld (prompt %lld, cached %lld, completion %lld)\n",
              job.value("id", "?").c_str(), job.value("status", "?").c_str(), job.value("model", "?").c_str(),
              job.value("n_turns", 0), (long long)u.value("total_tokens", 0), (long long)u.value("prompt_tokens", 0),
              (long long)u.value("cached_tokens", 0), (long long)u.value("completion_tokens", 0));
  if (job.contains("output") && job["output"].is_object()) {
    const json& o = job["output"];
    if (o.contains("content") && o["content"].is_string()) std::printf("output: %s\n", o["content"].get<std::string>().c_str());
    else std::printf("output: %s\n", o.dump().c_str());
  }
  if (job.contains("error") && job["error"].is_object())
    std::printf("error: %s\n", job["error"].value("message", "").c_str());
  if (job.contains("required_action") && job["required_action"].is_object())
    for (const auto& tc : job["required_action"].value("tool_calls", json::array()))
      std::printf("requires action: tool call %s\n", tc.dump().c_str());
}

// `keys list`: one key a row.
void print_keys_table(const json& keys) {
  std::printf("%-22s %-16s %-12s %-6s %s\n", "ID", "TENANT", "PREFIX", "ADMIN", "REVOKED");
  for (const auto& k : keys)
    std::printf("%-22s %-16s %-12s %-6s %s\n", k.value("id", "").c_str(), k.value("tenant", "").c_str(),
                k.value("prefix", "").c_str(), k.value("admin", false) ? "yes" : "no", k.value("revoked", false) ? "yes" : "no");
}

// `webhooks ID`: one delivery a row, its attempts indented under it.
void print_webhooks_table(const json& deliveries) {
  if (deliveries.empty()) {
    std::printf("no webhook deliveries\n");
    return;
  }
  std::printf("%-26s %-22s %-10s %-8s %s\n", "ID", "EVENT", "STATE", "ATTEMPTS", "URL");
  for (const auto& d : deliveries) {
    std::printf("%-26s %-22s %-10s %-8d %s\n", d.value("id", "").c_str(), d.value("event", "").c_str(),
                d.value("state", "").c_str(), d.value("n_attempts", 0), d.value("url", "").c_str());
    for (const auto& a : d.value("attempts", json::array())) {
      std::string outcome = a["status_code"].is_number() ? "HTTP " + std::to_string(a["status_code"].get<int>()) : "no response";
      if (a["error"].is_string()) outcome += " (" + a["error"].get<std::string>() + ")";
      std::printf("  attempt %d: %s, %lld ms\n", a.value("attempt", 0), outcome.c_str(), (long long)a.value("duration_ms", 0));
    }
  }
}

// `keys revoke` / `keys rotate-secret`: the key object (with webhook_secret after a rotation).
void print_key_action(const json& key, bool rotated) {
  if (rotated)
    std::printf("new webhook secret for %s (shown once): %s\n", key.value("id", "").c_str(), key.value("webhook_secret", "").c_str());
  else
    std::printf("revoked %s (tenant %s)\n", key.value("id", "").c_str(), key.value("tenant", "").c_str());
}

bool terminal_or_waiting(const std::string& s) {
  return s == "completed" || s == "failed" || s == "cancelled" || s == "incomplete" || s == "requires_action";
}

// Poll a job until it stops (terminal or requires_action); exit code by its status.
exit_code wait_job(api_client& api, const client::cli_command& cmd, const std::string& id, double timeout_s) {
  bool tty = ::isatty(STDERR_FILENO) && !cmd.json;
  auto t0 = std::chrono::steady_clock::now();
  auto delay = std::chrono::milliseconds(100);
  std::string last_line;
  while (true) {
    auto r = api.call("GET", "/v1/jobs/" + url_encode(id));
    if (!r.status) return api.exit();
    const json& job = r.body;
    std::string status = job.value("status", "?");
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[256];
    std::snprintf(line, sizeof line, "%s  %-15s turn %d  tokens %lld  %.1fs", id.c_str(), status.c_str(),
                  job.value("n_turns", 0), (long long)job.value("usage", json::object()).value("total_tokens", 0), elapsed);
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", line);
    } else if (!cmd.json) {
      std::string key = status + "/" + std::to_string(job.value("n_turns", 0));
      if (key != last_line) std::fprintf(stderr, "%s\n", line);
      last_line = key;
    }
    if (terminal_or_waiting(status)) {
      if (tty) std::fprintf(stderr, "\n");
      if (cmd.json) print_json(job);
      else print_job_summary(job);
      return client::exit_for_status(status);
    }
    if (timeout_s > 0 && elapsed > timeout_s) {
      if (tty) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "agentq: %s is still %s after %.0fs\n", id.c_str(), status.c_str(), timeout_s);
      return exit_code::timeout;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(std::chrono::milliseconds(2000), delay * 3 / 2);
  }
}

json build_submit_body(const client::cli_command& cmd, bool* ok) {
  *ok = true;
  if (!cmd.positional.empty()) {
    std::string text = read_file(cmd.positional[0], ok);
    if (!*ok) {
      std::fprintf(stderr, "agentq: cannot read %s\n", cmd.positional[0].c_str());
      return {};
    }
    json b = json::parse(text, nullptr, false);
    if (b.is_discarded() || !b.is_object()) {
      std::fprintf(stderr, "agentq: %s is not a JSON object\n", cmd.positional[0].c_str());
      *ok = false;
    }
    return b;
  }
  json b = {{"model", cmd.get("--model")}, {"messages", json::array()}};
  if (cmd.has("--system")) b["messages"].push_back({{"role", "system"}, {"content", cmd.get("--system")}});
  b["messages"].push_back({{"role", "user"}, {"content", cmd.get("--prompt")}});
  if (cmd.has("--tools")) {
    std::string text = read_file(cmd.get("--tools"), ok);
    json t = json::parse(text, nullptr, false);
    if (!*ok || t.is_discarded() || !t.is_array()) {
      std::fprintf(stderr, "agentq: --tools %s must hold a JSON array of tools\n", cmd.get("--tools").c_str());
      *ok = false;
      return {};
    }
    b["tools"] = t;
  }
  if (cmd.has("--webhook")) b["webhook"] = {{"url", cmd.get("--webhook")}};
  if (cmd.has("--priority")) b["priority"] = cmd.get("--priority");
  // named after the request fields they set (parse_cli checked they are whole numbers)
  if (cmd.has("--max-turns")) b["max_turns"] = std::stoi(cmd.get("--max-turns"));
  if (cmd.has("--max-output-tokens")) b["max_output_tokens"] = std::stoi(cmd.get("--max-output-tokens"));
  if (cmd.has("--max-tokens-per-turn")) b["max_tokens_per_turn"] = std::stoi(cmd.get("--max-tokens-per-turn"));
  if (cmd.has("--stop")) b["stop"] = cmd.all("--stop");
  for (const auto& kv : cmd.all("--metadata")) b["metadata"][kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return b;
}

// `export`: pages GET /v1/jobs (newest first) down to --since, and prints each job with its
// transcript (GET /v1/jobs/{id}) as one JSON line. NOTE: through the API only, never the file.
int export_jobs(api_client& api, const client::cli_command& cmd) {
  int64_t since_ms = cmd.has("--since") ? *client::parse_time_arg(cmd.get("--since")) : 0;
  int64_t max_jobs = cmd.has("--limit") ? std::stoll(cmd.get("--limit")) : INT64_MAX;
  std::string cursor;
  int64_t n = 0;
  for (;;) {
    auto page = api.call("GET", "/v1/jobs?limit=100" + (cursor.empty() ? std::string() : "&after=" + cursor));
    if (!page.status) return int(api.exit());
    for (const auto& j : page.body["data"]) {
      if (int64_t(j.value("created_at", 0.0) * 1000.0) < since_ms || n >= max_jobs) return 0;
      auto full = api.call("GET", "/v1/jobs/" + url_encode(j.value("id", "")));
      if (!full.status) {
        if (api.exit() == exit_code::error) continue;  // deleted meanwhile (404): skip it
        return int(api.exit());
      }
      std::printf("%s\n", full.body.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      ++n;
    }
    std::fflush(stdout);
    if (!page.body.value("has_more", false) || !page.body["next_cursor"].is_string()) return 0;
    cursor = page.body["next_cursor"].get<std::string>();
  }
}

int keys_direct(const client::cli_command& cmd) {
  std::string err;
  std::string db = (std::filesystem::path(cmd.get("--data-dir")) / "agentq.db").string();
  auto fail = [&](exit_code code, const std::string& msg) {
    if (cmd.json) print_error_json(code == exit_code::usage ? "usage" : "error", msg);
    std::fprintf(stderr, "agentq: %s\n", msg.c_str());
    return int(code);
  };
  if (!std::filesystem::exists(db)) return fail(exit_code::usage, "no database at " + db + " (start agentqd with --data-dir first)");
  auto keys = auth::key_store::open(db, &err);
  if (!keys) return fail(exit_code::error, err);
  auto key_json = [](const auth::key_info& k) {
    return json{{"id", k.id},         {"tenant", k.tenant},           {"prefix", k.prefix},
                {"admin", k.is_admin}, {"revoked", k.revoked_ms > 0},
                {"retention_days", k.retention_days >= 0 ? json(k.retention_days) : json(nullptr)}};
  };
  if (cmd.name == "keys create") {
    auto k = keys->create(cmd.get("--tenant"), cmd.has("--admin"), &err);
    if (!k) return fail(exit_code::error, err);
    if (cmd.has("--retention-days") && keys->set_retention_days(k->info.id, std::stoi(cmd.get("--retention-days"))))
      k->info.retention_days = std::stoi(cmd.get("--retention-days"));
    json j = key_json(k->info);
    j["key"] = k->key;
    j["webhook_secret"] = k->info.webhook_secret;
    if (cmd.json) print_json(j);
    else std::printf("created %s for tenant %s (shown once):\n  key:            %s\n  webhook secret: %s\n",
                     k->info.id.c_str(), k->info.tenant.c_str(), k->key.c_str(), k->info.webhook_secret.c_str());
    return 0;
  }
  if (cmd.name == "keys list") {
    json data = json::array();
    for (const auto& k : keys->list(cmd.get("--tenant"))) data.push_back(key_json(k));
    if (cmd.json) print_json(data);
    else print_keys_table(data);
    return 0;
  }
  const std::string& key_id = cmd.positional[0];
  auto before = keys->get(key_id);
  if (!before || before->revoked_ms > 0) return fail(exit_code::error, "no active key " + key_id);
  json out = key_json(*before);
  bool rotate = cmd.name == "keys rotate-secret";
  if (rotate) {
    auto s = keys->rotate_secret(key_id);
    if (!s) return fail(exit_code::error, "no active key " + key_id);
    out["webhook_secret"] = *s;
  } else {
    if (!keys->revoke(key_id)) return fail(exit_code::error, "no active key " + key_id);
    out["revoked"] = true;
  }
  if (cmd.json) print_json(out);
  else print_key_action(out, rotate);
  return 0;
}

int run(const client::cli_command& cmd) {
  if (cmd.name == "help") {
    std::fputs(client::cli_usage(), stdout);
    return 0;
  }
  if (cmd.name.starts_with("keys ") && cmd.has("--data-dir")) return keys_direct(cmd);
  api_client api(cmd);
  // a reply holding a job: its summary, or the JSON under --json
  auto done = [&](const api_reply& r) -> int {
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else print_job_summary(r.body);
    return 0;
  };
  const std::string id = cmd.positional.empty() ? "" : url_encode(cmd.positional[0]);

  if (cmd.name == "submit") {
    bool ok;
    json body = build_submit_body(cmd, &ok);
    if (!ok) return int(exit_code::usage);
    std::vector<std::pair<std::string, std::string>> headers;
    if (cmd.has("--idempotency-key")) headers.emplace_back("Idempotency-Key", cmd.get("--idempotency-key"));
    auto r = api.call("POST", "/v1/jobs", &body, headers);
    if (!r.status) return int(api.exit());
    std::string job_id = r.body.value("id", "");
    if (!cmd.has("--wait")) {
      if (cmd.json) print_json(r.body);
      else std::printf("%s\n", job_id.c_str());
      return 0;
    }
    if (!cmd.json) std::fprintf(stderr, "submitted %s\n", job_id.c_str());
    return int(wait_job(api, cmd, job_id, std::stod(cmd.get("--timeout", "0"))));
  }
  if (cmd.name == "status" && cmd.has("--timeline")) {
    auto r = api.call("GET", "/v1/jobs/" + id + "/timeline");
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else std::fputs(client::render_timeline(r.body, 40, store::now_ms()).c_str(), stdout);
    return 0;
  }
  if (cmd.name == "status") return done(api.call("GET", "/v1/jobs/" + id));
  if (cmd.name == "wait") return int(wait_job(api, cmd, cmd.positional[0], std::stod(cmd.get("--timeout", "0"))));
  if (cmd.name == "cancel") return done(api.call("POST", "/v1/jobs/" + id + "/cancel"));
  if (cmd.name == "delete") {
    auto r = api.call("DELETE", "/v1/jobs/" + id);
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else std::printf("deleted %s\n", r.body.value("id", "").c_str());
    return 0;
  }
  if (cmd.name == "export") return export_jobs(api, cmd);
  if (cmd.name == "webhooks") {
    auto r = api.call("GET", "/v1/jobs/" + id + "/webhooks");
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else print_webhooks_table(r.body["data"]);
    return 0;
  }
  if (cmd.name == "models") {
    auto r = api.call("GET", "/v1/models");
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else for (const auto& m : r.body["data"]) std::printf("%s  %s  ctx=%d\n", m.value("id", "").c_str(),
                                                           m.value("arch", "").c_str(), m.value("context_length", 0));
    return 0;
  }
  if (cmd.name == "list") {
    std::string q = "?limit=" + cmd.get("--limit", "20");
    if (cmd.has("--status")) q += "&status=" + url_encode(cmd.get("--status"));
    if (cmd.has("--after")) q += "&after=" + url_encode(cmd.get("--after"));
    for (const auto& kv : cmd.all("--metadata"))
      q += "&metadata." + url_encode(kv.substr(0, kv.find('='))) + "=" + url_encode(kv.substr(kv.find('=') + 1));
    auto r = api.call("GET", "/v1/jobs" + q);
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else for (const auto& j : r.body["data"]) print_job_summary(j);
    return 0;
  }
  if (cmd.name == "events") {
    // NOTE: --follow polls the JSON list with a cursor (simple and proxy-friendly); SSE is for programs.
    // It ends when the job does, with the job's exit code (as `wait`); requires_action keeps it waiting.
    // The status is read before the events, so once it is terminal the list holds every event.
    bool follow = cmd.has("--follow");
    int64_t after = std::stoll(cmd.get("--after", "0"));
    auto delay = std::chrono::milliseconds(100);
    while (true) {
      std::string st;
      if (follow) {
        auto job = api.call("GET", "/v1/jobs/" + id);
        if (!job.status) return int(api.exit());
        st = job.body.value("status", "");
      }
      auto r = api.call("GET", "/v1/jobs/" + id + "/events?after=" + std::to_string(after));
      if (!r.status) return int(api.exit());
      for (const auto& e : r.body["data"]) {
        after = e.value("id", after);
        if (cmd.json) std::printf("%s\n", e.dump().c_str());
        else std::printf("%lld  %-12s %s\n", (long long)e.value("id", 0), e.value("type", "").c_str(), e["data"].dump().c_str());
      }
      std::fflush(stdout);
      if (!follow) return 0;
      if (st == "completed" || st == "failed" || st == "cancelled" || st == "incomplete")
        return int(client::exit_for_status(st));
      if (!r.body["data"].empty()) {
        delay = std::chrono::milliseconds(100);
        continue;
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(std::chrono::milliseconds(1000), delay * 2);
    }
  }
  if (cmd.name == "tool-outputs") {
    json body;
    if (cmd.positional.size() == 2) {
      bool ok;
      body = json::parse(read_file(cmd.positional[1], &ok), nullptr, false);
      if (!ok || body.is_discarded()) {
        std::fprintf(stderr, "agentq: cannot read JSON from %s\n", cmd.positional[1].c_str());
        return int(exit_code::usage);
      }
    } else {
      body = {{"tool_outputs", {{{"tool_call_id", cmd.get("--call-id")}, {"output", cmd.get("--output")}}}}};
    }
    return done(api.call("POST", "/v1/jobs/" + id + "/tool_outputs", &body));
  }
  if (cmd.name == "keys create") {
    json body = {{"tenant", cmd.get("--tenant")}, {"admin", cmd.has("--admin")}};
    if (cmd.has("--retention-days")) body["retention_days"] = std::stoi(cmd.get("--retention-days"));
    auto r = api.call("POST", "/v1/keys", &body);
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else std::printf("created %s for tenant %s (shown once):\n  key:            %s\n  webhook secret: %s\n",
                     r.body.value("id", "").c_str(), r.body.value("tenant", "").c_str(), r.body.value("key", "").c_str(),
                     r.body.value("webhook_secret", "").c_str());
    return 0;
  }
  if (cmd.name == "keys list") {
    auto r = api.call("GET", "/v1/keys");
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else print_keys_table(r.body["data"]);
    return 0;
  }
  if (cmd.name == "keys revoke" || cmd.name == "keys rotate-secret") {
    bool rotate = cmd.name == "keys rotate-secret";
    auto r = api.call("POST", "/v1/keys/" + id + (rotate ? "/rotate_secret" : "/revoke"));
    if (!r.status) return int(api.exit());
    if (cmd.json) print_json(r.body);
    else print_key_action(r.body, rotate);
    return 0;
  }
  std::fprintf(stderr, "agentq: unhandled command %s\n", cmd.name.c_str());
  return int(exit_code::usage);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::string err;
  auto cmd = client::parse_cli(
      args,
      [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        return v && *v ? std::optional<std::string>(v) : std::nullopt;
      },
      &err);
  if (!cmd) {
    // --json asked for machine-readable output; a usage error is one too
    if (std::find(args.begin() + 1, args.end(), "--json") != args.end()) print_error_json("usage", err);
    std::fprintf(stderr, "agentq: %s\n\n%s", err.c_str(), client::cli_usage());
    return int(exit_code::usage);
  }
  try {
    return run(*cmd);
  } catch (const std::exception& e) {
    if (cmd->json) print_error_json("error", e.what());
    std::fprintf(stderr, "agentq: %s\n", e.what());
    return int(exit_code::error);
  }
}
