// End-to-end helpers shared by the tests/e2e/*.cpp that run a real agentqd: the daemon in a
// temp data dir (embedded redis-server, the tiny model), a JSON API client over loopback, and
// a loopback webhook receiver that can fail its first n requests.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "http/router.h"
#include "http/server.h"
#include "net/http_client.h"
#include "test_env.h"

namespace agentq::test::e2e {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

inline const std::string k_admin_key = "aq_test_admin_key_0123456789abcdef";

// A webhook receiver on loopback that can fail its first n_fail requests with 500.
struct receiver {
  struct hit {
    std::string id, timestamp, signature, body;
    int status;
  };
  std::mutex mu;
  std::vector<hit> hits;
  int n_fail = 0;
  http::router r;
  std::unique_ptr<http::server> srv;

  receiver() {
    r.add("POST", "/hook", [this](http::request& req) {
      std::lock_guard lock(mu);
      int status = n_fail > 0 ? 500 : 200;
      if (n_fail > 0) --n_fail;
      hits.push_back({req.header("webhook-id"), req.header("webhook-timestamp"), req.header("webhook-signature"),
                      req.body, status});
      http::response res;
      res.status = status;
      return res;
    });
    http::server_options o;
    o.port = 0;
    o.n_threads = 2;
    srv = std::make_unique<http::server>(o, [this](http::request& req) { return r.dispatch(req); });
    std::string err;
    REQUIRE_MESSAGE(srv->start(&err), err);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(srv->port()) + "/hook"; }
  std::vector<hit> snapshot() {
    std::lock_guard lock(mu);
    return hits;
  }
  // Wait until pred(hits) holds or timeout.
  template <class P>
  bool wait_for(P pred, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(snapshot())) return true;
      std::this_thread::sleep_for(50ms);
    }
    return pred(snapshot());
  }
};

// agentqd in a temp data dir; SIGTERM + wait on destruction.
// Fork + exec agentqd (args[0] is its path) with stdout and stderr going to log_path (appended
// to when append, else truncated), and wait up to 60 s for it to write its port to port_file.
// The child's pid with *port set; -1 if it exited first or timed out (then it is killed).
inline pid_t spawn_agentqd(std::vector<std::string> args, const fs::path& log_path, bool append,
                           const fs::path& port_file, int* port) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = freopen(log_path.c_str(), append ? "a" : "w", stdout);
    (void)f;
    dup2(STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  auto end = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream pf(port_file);
    if (pf >> *port && *port > 0) return pid;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;
    std::this_thread::sleep_for(50ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

struct daemon_proc {
  fs::path dir;
  pid_t pid = -1;
  int port = 0;

  explicit daemon_proc(std::vector<std::string> extra = {}) {
    std::string tmpl = (fs::temp_directory_path() / "agentq-e2e-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()));
    dir = tmpl;
    std::vector<std::string> args = {(test::bin_dir() / "agentqd").string(),
                                     "--data-dir",
                                     (dir / "data").string(),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--port-file",
                                     (dir / "port").string(),
                                     "--model",
                                     test::tiny_model().string(),
                                     "--allow-addresses",
                                     "127.0.0.0/8",
                                     "--admin-key",
                                     k_admin_key,
                                     "--webhook-schedule",
                                     "300,300,300,300",
                                     "--rate-limit",
                                     "0",
                                     "--log-level",
                                     "info"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = spawn_agentqd(std::move(args), dir / "agentqd.out", false, dir / "port", &port);
    if (pid < 0) FAIL("agentqd exited or did not start within 60 s:\n" << log());
  }
  ~daemon_proc() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      int status = 0;
      for (int i = 0; i < 300 && waitpid(pid, &status, WNOHANG) != pid; ++i) std::this_thread::sleep_for(50ms);
      if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string log() const {
    std::ifstream in(dir / "agentqd.out");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port) + path; }
};

struct reply {
  int status = 0;
  json body;
  std::string raw;
  net::http_response res;
};

struct api {
  const daemon_proc& d;
  std::string key;
  net::http_client client{net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", nullptr))};

  reply call(const std::string& method, const std::string& path, const std::string& body = "",
             std::vector<std::pair<std::string, std::string>> headers = {}) const {
    net::http_request req;
    req.method = method;
    req.url = d.url(path);
    req.body = body;
    req.timeout = 30s;
    req.max_response_bytes = 16 << 20;
    req.headers = std::move(headers);
    if (!key.empty()) req.headers.emplace_back("Authorization", "Bearer " + key);
    bool typed = std::any_of(req.headers.begin(), req.headers.end(), [](const auto& h) {
      return h.first == "Content-Type";
    });
    if (!body.empty() && !typed) req.headers.emplace_back("Content-Type", "application/json");
    auto res = client.send(req);
    REQUIRE_MESSAGE(res.ok(), res.message);
    reply r;
    r.status = res.response.status;
    r.raw = res.response.body;
    r.body = json::parse(r.raw, nullptr, false);
    r.res = res.response;
    return r;
  }
  reply post(const std::string& path, const json& body, std::vector<std::pair<std::string, std::string>> h = {}) const {
    return call("POST", path, body.dump(), std::move(h));
  }
  reply get(const std::string& path) const { return call("GET", path); }

  // Poll until the job's status is one of `want` (or terminal); the job.
  json wait_status(const std::string& id, std::vector<std::string> want, std::chrono::seconds timeout = 60s) const {
    auto end = std::chrono::steady_clock::now() + timeout;
    json job;
    while (std::chrono::steady_clock::now() < end) {
      job = get("/v1/jobs/" + id).body;
      std::string s = job.value("status", "");
      if (std::find(want.begin(), want.end(), s) != want.end()) return job;
      std::this_thread::sleep_for(50ms);
    }
    return job;
  }
};

inline json simple_job(const std::string& prompt = "Once upon a time") {
  return {{"model", "stories260K"},
          {"messages", {{{"role", "user"}, {"content", prompt}}}},
          {"max_turns", 2},
          {"max_tokens_per_turn", 24}};
}

// key + webhook secret for a new tenant
inline std::pair<std::string, std::string> make_tenant(const api& admin, const std::string& tenant) {
  auto r = admin.post("/v1/keys", {{"tenant", tenant}});
  REQUIRE(r.status == 201);
  return {r.body["key"].get<std::string>(), r.body["webhook_secret"].get<std::string>()};
}

}  // namespace agentq::test::e2e
