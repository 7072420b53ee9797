// The embedded Redis (daemon/redis_supervisor): agentqd SIGKILLed and restarted on the same data
// dir leaves exactly one redis-server on that dir, and a job queued before the kill still runs;
// the worker's start is logged once.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agentqd_e2e.h"

using namespace agentq;
using namespace agentq::test::e2e;

namespace {

// pids of live redis-server processes working in dir (redis chdirs to its --dir and rewrites
// its command line to "redis-server host:port", so the cwd is what names the directory)
std::vector<pid_t> redis_servers_on(const fs::path& dir) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/proc", ec)) {
    pid_t pid = std::atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream st(e.path() / "stat");
    std::string stat;
    std::getline(st, stat);
    auto rp = stat.rfind(')');
    if (rp == std::string::npos || (rp + 2 < stat.size() && stat[rp + 2] == 'Z')) continue;
    std::ifstream in(e.path() / "comm");
    std::string comm;
    std::getline(in, comm);
    if (comm != "redis-server") continue;
    auto cwd = fs::read_symlink(e.path() / "cwd", ec);
    if (!ec && cwd.string().starts_with(dir.string())) out.push_back(pid);
  }
  return out;
}

// agentqd on `dir` (as daemon_proc, but the dir is the caller's so it can be restarted on it)
pid_t start_agentqd(const fs::path& dir, const std::string& role, int* port) {
  fs::remove(dir / "port");
  std::vector<std::string> args = {(test::bin_dir() / "agentqd").string(), "--data-dir", (dir / "data").string(),
                                   "--listen", "127.0.0.1:0", "--port-file", (dir / "port").string(),
                                   "--model", test::tiny_model().string(), "--allow-addresses", "127.0.0.0/8",
                                   "--admin-key", k_admin_key, "--rate-limit", "0", "--role", role};
  return spawn_agentqd(std::move(args), dir / "agentqd.out", true, dir / "port", port);
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("agentqd SIGKILLed and restarted: one redis-server owns the data dir, the queued job runs") {
  test::require_tiny_model();
  if (system("command -v redis-server >/dev/null 2>&1") != 0) test::skip("redis-server not installed");
  std::string tmpl = (fs::temp_directory_path() / "agentq-e2e-XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()));
  fs::path dir = tmpl;
  auto log = [&] {
    std::ifstream in(dir / "agentqd.out");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  int port = 0;
  pid_t a = -1, b = -1;
  struct cleanup {  // a failed REQUIRE must not leave agentqd or redis-server running
    std::function<void()> fn;
    ~cleanup() { fn(); }
  } at_exit{[&] {
    for (pid_t p : {a, b})
      if (p > 0 && kill(p, SIGKILL) == 0) waitpid(p, nullptr, 0);
    for (pid_t p : redis_servers_on(dir)) kill(p, SIGKILL);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }};
  net::http_client client{net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", nullptr))};
  auto call = [&](const std::string& method, const std::string& path, const std::string& body) {
    net::http_request req;
    req.method = method;
    req.url = "http://127.0.0.1:" + std::to_string(port) + path;
    req.body = body;
    req.timeout = 30s;
    req.headers = {{"Authorization", "Bearer " + k_admin_key}};
    if (!body.empty()) req.headers.emplace_back("Content-Type", "application/json");
    auto res = client.send(req);
    REQUIRE_MESSAGE(res.ok(), res.message);
    return std::make_pair(res.response.status, json::parse(res.response.body, nullptr, false));
  };

  // api only: the job waits in the embedded Redis
  a = start_agentqd(dir, "api", &port);
  REQUIRE_MESSAGE(a > 0, log());
  REQUIRE_MESSAGE(redis_servers_on(dir).size() == 1, log());
  auto [sub_status, sub] = call("POST", "/v1/jobs", simple_job().dump());
  REQUIRE_MESSAGE(sub_status == 202, sub.dump());
  std::string id = sub["id"].get<std::string>();
  std::this_thread::sleep_for(1500ms);  // past appendfsync everysec

  kill(a, SIGKILL);
  waitpid(a, nullptr, 0);
  a = -1;
  b = start_agentqd(dir, "all", &port);
  REQUIRE_MESSAGE(b > 0, log());
  // the old redis-server goes (with its parent, or stopped by the new agentqd): exactly one stays
  bool one = eventually([&] { return redis_servers_on(dir).size() == 1; }, 15s);
  CHECK_MESSAGE(one, "redis-servers on the dir: " << redis_servers_on(dir).size() << "\n" << log());
  std::this_thread::sleep_for(1s);
  CHECK(redis_servers_on(dir).size() == 1);
  json job;
  eventually(
      [&] {
        job = call("GET", "/v1/jobs/" + id, "").second;
        auto s = job.value("status", "");
        return s == "completed" || s == "incomplete" || s == "failed";
      },
      90s);
  // NOTE: the tiny model may run into max_tokens_per_turn; either way the job ran
  std::string final_status = job.value("status", "");
  CHECK_MESSAGE((final_status == "completed" || final_status == "incomplete"), job.dump() << "\n" << log());

  // the restarted agentqd (the first had no worker) logs its worker's start once (was twice, #24)
  int n_started = 0;
  std::istringstream lines(log());
  for (std::string line; std::getline(lines, line);)
    if (line.find("] worker ") != std::string::npos && line.ends_with(" started")) ++n_started;
  CHECK_MESSAGE(n_started == 1, log());

  // a second agentqd on the same dir while the first lives: refused, and the first's redis-server
  // is left alone (a pid file alone would have had it stopped)
  int port_c = 0;
  pid_t c = start_agentqd(dir, "all", &port_c);
  if (c > 0) kill(c, SIGKILL), waitpid(c, nullptr, 0);
  CHECK_MESSAGE(c == -1, "a second agentqd started on a data dir whose embedded Redis is owned\n" << log());
  CHECK(log().find("another agentqd is running the embedded Redis") != std::string::npos);
  CHECK(redis_servers_on(dir).size() == 1);
  CHECK(call("GET", "/v1/jobs/" + id, "").first == 200);  // the first still serves from its Redis

  // SIGTERM stops agentqd and its redis-server
  kill(b, SIGTERM);
  int status = 0;
  bool gone = eventually([&] { return waitpid(b, &status, WNOHANG) == b; }, 20s);
  if (!gone) {
    kill(b, SIGKILL);
    waitpid(b, nullptr, 0);
  }
  b = -1;
  CHECK(gone);
  bool none = eventually([&] { return redis_servers_on(dir).empty(); }, 10s);
  CHECK_MESSAGE(none, "redis-servers left: " << redis_servers_on(dir).size());
}
