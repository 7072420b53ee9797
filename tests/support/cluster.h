// A whole agentq deployment on loopback for fault-injection scenarios (docs/RELIABILITY.md):
// redis-server with AOF (appendfsync everysec by default) in a temp dir, one `agentqd --role api`
// on a fixed port (restarts keep the URL), N `agentqd --role worker` processes sharing the SQLite
// file, a tool server that records every call and applies each call id's side effect once, a
// webhook receiver that records every delivery, and a client driver that logs every request and
// response (job ids acknowledged with 202, the poll history). tests/support/history_check.h checks
// the recorded history against agentq's promises.
//
// Interface (kept stable; other scenario files build on it):
//   test::cluster c(opts);                 // starts everything; throws std::runtime_error on failure
//   c.redis()                              // test::redis_server: kill9(), restart(), pause(), command()
//   c.api(), c.worker(i), c.n_workers()    // test::child_process: kill9(), pause(), resume(),
//                                          //   terminate(), start(), restart(), env(), log_text()
//   c.add_worker(env), c.restart_api(), c.restart_worker(i, env)  // restart waits until ready
//   c.worker_id(i)                         // worker i's --worker-id ("w<i>"), kept across restarts
//   c.tools(), c.webhooks()                // test::tool_server: requests(), set_handler()
//   c.tool_handler(), c.webhook_handler()  // the default handlers (wrap them to inject failures)
//   c.tool_url(), c.webhook_url()
//   c.client()                             // test::client_driver: submit(), get_job(), call(), log()
//   c.wait_terminal(ids, timeout)          // poll (recorded) until every id is terminal
//   c.drain(timeout)                       // all acked jobs terminal, webhooks in, Redis idle
//   c.db_path(), c.dir()
//   test::tool_job(...), test::text_job(...)  // request bodies that run on the tiny model
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "net/http_client.h"
#include "queue/redis_client.h"
#include "redis_pending.h"
#include "redis_server.h"
#include "temp_dir.h"
#include "test_env.h"
#include "tool_server.h"

namespace agentq::test {

using json = nlohmann::json;

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline bool is_terminal_status(const std::string& s) {
  return s == "completed" || s == "failed" || s == "cancelled" || s == "incomplete";
}

// ---------------------------------------------------------------------------
// The client driver: every exchange is logged (thread-safe), in order of completion.

struct exchange {
  int64_t seq = 0;
  int64_t t_send_ms = 0, t_recv_ms = 0;  // wall clock
  std::string method, path, request;
  int status = 0;                        // 0 = no response (transport error in `error`)
  std::string response, error;
};

class client_driver {
 public:
  client_driver(std::string base_url, std::string key) : base_(std::move(base_url)), key_(std::move(key)) {}

  void set_key(std::string key) { key_ = std::move(key); }
  const std::string& key() const { return key_; }
  const std::string& base_url() const { return base_; }

  exchange call(const std::string& method, const std::string& path, const std::string& body = "",
                std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::vector<std::pair<std::string, std::string>> headers = {}) {  // e.g. Idempotency-Key
    net::http_request req;
    req.method = method;
    req.url = base_ + path;
    req.body = body;
    req.timeout = timeout;
    req.max_response_bytes = 16 << 20;
    req.headers = std::move(headers);
    if (!key_.empty()) req.headers.emplace_back("Authorization", "Bearer " + key_);
    if (!body.empty()) req.headers.emplace_back("Content-Type", "application/json");
    exchange x;
    x.method = method;
    x.path = path;
    x.request = body;
    x.t_send_ms = wall_ms();
    auto res = client_.send(req);
    x.t_recv_ms = wall_ms();
    if (res.ok()) {
      x.status = res.response.status;
      x.response = res.response.body;
    } else {
      x.error = res.message;
    }
    std::lock_guard lock(mu_);
    x.seq = int64_t(log_.size());
    log_.push_back(x);
    if (method == "POST" && path == "/v1/jobs" && x.status == 202) {
      json b = json::parse(x.response, nullptr, false);
      if (b.is_object() && b.contains("id")) acked_.push_back(b["id"].get<std::string>());
    }
    if (method == "DELETE" && x.status == 200 && path.starts_with("/v1/jobs/")) deleted_.insert(path.substr(9));
    return x;
  }
  json call_json(const std::string& method, const std::string& path, const json& body = nullptr) {
    auto x = call(method, path, body.is_null() ? "" : body.dump());
    return json::parse(x.response, nullptr, false);
  }

  // POST /v1/jobs; the job id if acknowledged with 202 (recorded as acked), else nullopt.
  std::optional<std::string> submit(const json& job) {
    auto x = call("POST", "/v1/jobs", job.dump());
    if (x.status != 202) return std::nullopt;
    return json::parse(x.response)["id"].get<std::string>();
  }
  // GET /v1/jobs/{id} (part of the poll history); discarded json when no 200.
  json get_job(const std::string& id) {
    auto x = call("GET", "/v1/jobs/" + id);
    return x.status == 200 ? json::parse(x.response, nullptr, false) : json(json::value_t::discarded);
  }

  std::vector<std::string> acked_ids() {
    std::lock_guard lock(mu_);
    return acked_;
  }
  // Jobs a DELETE /v1/jobs/{id} answered 200 for (tombstones: every later read is a 404).
  bool deleted(const std::string& id) {
    std::lock_guard lock(mu_);
    return deleted_.count(id) > 0;
  }
  std::vector<exchange> log() {
    std::lock_guard lock(mu_);
    return log_;
  }

 private:
  std::string base_, key_;
  net::http_client client_{net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", nullptr))};
  std::mutex mu_;
  std::vector<exchange> log_;
  std::vector<std::string> acked_;
  std::set<std::string> deleted_;
};

// ---------------------------------------------------------------------------
// Job bodies that run on the tiny model (stories260K) and end by themselves.

// Two turns: a forced, grammar-constrained call of the server-side tool `get_weather` (enum
// argument, one call per turn), then free text until "." (see scripts/demo.sh). `marker` goes into
// metadata.chaos (AGENTQ_FAULT_MATCH targets one job with it).
inline json tool_job(const std::string& tool_url, const std::string& webhook_url, const std::string& marker) {
  json j = {{"model", "stories260K"},
            {"messages",
             {{{"role", "system"}, {"content", "You are a helpful assistant. Use the weather tool, then answer."}},
              {{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
            {"tools",
             {{{"type", "function"},
               {"function",
                {{"name", "get_weather"},
                 {"description", "Current weather for a city"},
                 {"parameters",
                  {{"type", "object"},
                   {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "London", "Tokyo"}}}}}},
                   {"required", {"city"}}}}}},
               {"execution", {{"type", "http"}, {"url", tool_url}, {"timeout_ms", 5000}}}}}},
            {"tool_choice", "required"},
            {"parallel_tool_calls", false},
            {"max_turns", 4},
            {"max_tokens_per_turn", 256},
            {"stop", {"."}},
            {"metadata", {{"chaos", marker}}}};
  if (!webhook_url.empty()) j["webhook"] = {{"url", webhook_url}};
  return j;
}

// One turn of free text (max_tokens tokens or a "."); `marker` into metadata.chaos.
inline json text_job(const std::string& webhook_url, const std::string& marker, int max_tokens = 24) {
  json j = {{"model", "stories260K"},
            {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
            {"max_turns", 2},
            {"max_tokens_per_turn", max_tokens},
            {"metadata", {{"chaos", marker}}}};
  if (!webhook_url.empty()) j["webhook"] = {{"url", webhook_url}};
  return j;
}

// ---------------------------------------------------------------------------

struct cluster_options {
  int n_workers = 2;
  std::string appendfsync = "everysec";            // redis AOF policy
  // Dispatch timing, short so that a dead worker's jobs move on within a couple of seconds.
  int64_t lease_ms = 2000;
  int64_t heartbeat_ms = 200;
  int64_t reclaim_idle_ms = 1500;
  int64_t reclaim_interval_ms = 300;
  int max_deliveries = 3;
  std::string webhook_schedule = "200,400,800,1600,3200";  // ms between webhook retries
  int max_jobs = 16;                               // per worker
  std::vector<std::string> api_args, worker_args;  // extra agentqd flags
  std::map<std::string, std::string> api_env, worker_env;  // e.g. {"AGENTQ_FAULT", "mid_decode"}
  std::chrono::milliseconds start_timeout{60000};
  // Called with the (empty) data dir before any agentqd starts, e.g. to mount a small tmpfs there.
  std::function<void(const std::filesystem::path&)> prepare_data_dir;
};

class cluster {
 public:
  static constexpr const char* k_admin_key = "aq_chaos_admin_key_0123456789abcdef";

  explicit cluster(cluster_options o = {})
      : opts_(std::move(o)),
        redis_(true, opts_.appendfsync),
        tools_(tool_handler()),
        hooks_(webhook_handler()) {
    std::filesystem::create_directories(data_dir());
    if (opts_.prepare_data_dir) opts_.prepare_data_dir(data_dir());
    api_port_ = free_port();
    std::vector<std::string> args = common_args();
    for (auto a : {"--role", "api", "--listen"}) args.push_back(a);
    args.push_back("127.0.0.1:" + std::to_string(api_port_));
    for (auto a : {"--admin-key", k_admin_key, "--rate-limit", "0", "--webhook-schedule"}) args.push_back(a);
    args.push_back(opts_.webhook_schedule);
    args.insert(args.end(), opts_.api_args.begin(), opts_.api_args.end());
    api_ = std::make_unique<child_process>("api", args, dir_.path() / "api.log", opts_.api_env);
    api_->start();
    wait_api_ready();
    client_ = std::make_unique<client_driver>("http://127.0.0.1:" + std::to_string(api_port_), k_admin_key);
    auto k = client_->call_json("POST", "/v1/keys", {{"tenant", "chaos"}});
    if (!k.is_object() || !k.contains("key")) throw std::runtime_error("cluster: creating a tenant key failed");
    client_->set_key(k["key"].get<std::string>());
    webhook_secret_ = k["webhook_secret"].get<std::string>();
    for (int i = 0; i < opts_.n_workers; ++i) add_worker(opts_.worker_env);
  }
  ~cluster() {
    for (auto& w : workers_) w->kill9();
    if (api_) api_->kill9();
  }
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  const cluster_options& options() const { return opts_; }
  redis_server& redis() { return redis_; }
  child_process& api() { return *api_; }
  child_process& worker(size_t i) { return *workers_.at(i); }
  std::string worker_id(size_t i) const { return "w" + std::to_string(i); }  // its --worker-id (lease_owner)
  size_t n_workers() const { return workers_.size(); }
  tool_server& tools() { return tools_; }
  tool_server& webhooks() { return hooks_; }
  client_driver& client() { return *client_; }
  const std::string& webhook_secret() const { return webhook_secret_; }
  std::string tool_url() const { return tools_.url("/tool"); }
  std::string webhook_url() const { return hooks_.url("/hook"); }
  std::filesystem::path dir() const { return dir_.path(); }
  std::filesystem::path data_dir() const { return dir_.path() / "data"; }
  std::string db_path() const { return (data_dir() / "agentq.db").string(); }
  std::string api_url() const { return "http://127.0.0.1:" + std::to_string(api_port_); }

  // Start one more worker (environment on top of the parent's); waits until it serves. Its index.
  size_t add_worker(std::map<std::string, std::string> env = {}) {
    size_t idx = workers_.size();
    std::vector<std::string> args = common_args();
    for (auto a : {"--role", "worker", "--lease-ms"}) args.push_back(a);
    args.push_back(std::to_string(opts_.lease_ms));
    args.push_back("--heartbeat-ms");
    args.push_back(std::to_string(opts_.heartbeat_ms));
    args.push_back("--reclaim-interval-ms");
    args.push_back(std::to_string(opts_.reclaim_interval_ms));
    args.push_back("--max-jobs");
    args.push_back(std::to_string(opts_.max_jobs));
    args.insert(args.end(), opts_.worker_args.begin(), opts_.worker_args.end());
    // NOTE: each worker its own stable id (#28), kept across restart_worker; tests find a job's
    // worker by it (lease_owner).
    if (std::find(args.begin(), args.end(), "--worker-id") == args.end()) {
      args.push_back("--worker-id");
      args.push_back(worker_id(idx));
    }
    workers_.push_back(std::make_unique<child_process>("worker" + std::to_string(idx), args,
                                                       dir_.path() / ("worker" + std::to_string(idx) + ".log"),
                                                       std::move(env)));
    start_worker(idx);
    return idx;
  }
  // kill -9 (if running), set its environment, start again and wait until it serves.
  void restart_worker(size_t i, std::map<std::string, std::string> env = {}) {
    workers_.at(i)->kill9();
    workers_.at(i)->env() = std::move(env);
    start_worker(i);
  }
  void start_worker(size_t i) {
    auto& w = *workers_.at(i);
    int before = count_in(w.log_text(), "started");
    w.start();
    // NOTE: agentqd logs "worker <id> started" once the worker reads from Redis.
    if (!wait_for_log_count(w, "started", before + 1))
      throw std::runtime_error("cluster: " + w.name() + " did not start:\n" + w.log_text());
  }
  // kill -9 the API (if running), start it again on the same port, wait until /healthz answers.
  void restart_api(std::map<std::string, std::string> env = {}) {
    api_->kill9();
    api_->env() = std::move(env);
    api_->start();
    wait_api_ready();
  }

  // The last n_bytes of every process's log, for failure messages.
  std::string logs_tail(size_t n_bytes = 3000) {
    std::string out;
    auto add = [&](child_process& p) {
      std::string t = p.log_text();
      out += "---- " + p.name() + " (" + p.log_path().string() + ")\n" + t.substr(t.size() > n_bytes ? t.size() - n_bytes : 0);
    };
    add(*api_);
    for (auto& w : workers_) add(*w);
    return out;
  }

  // Poll each id (GET, recorded) until terminal; false on timeout.
  bool wait_terminal(const std::vector<std::string>& ids, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    std::set<std::string> open(ids.begin(), ids.end());
    while (!open.empty()) {
      for (auto it = open.begin(); it != open.end();) {
        json j = client_->get_job(*it);
        if ((!j.is_discarded() && is_terminal_status(j.value("status", ""))) || client_->deleted(*it))
          it = open.erase(it);
        else
          ++it;
      }
      if (open.empty()) break;
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  // The settled end of a scenario: every acked job terminal (and polled once more), every
  // terminal event with a webhook delivered at least once, nothing pending in Redis.
  bool drain(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto end = std::chrono::steady_clock::now() + timeout;
    auto ids = client_->acked_ids();
    if (!wait_terminal(ids, timeout)) return false;
    for (auto& id : ids) client_->get_job(id);  // one more observation of each final state
    while (std::chrono::steady_clock::now() < end) {
      if (n_redis_pending() == 0 && n_missing_webhooks(ids) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // Entries delivered but not acked, summed over the job streams and the workers' streams.
  int64_t n_redis_pending() { return test::n_redis_pending(redis_.port()); }

  // The default tool: records the call, applies its side effect once per (job_id, call_id) and
  // answers the same output to a repeated call id (what a tool server does with agentq's stable ids).
  tool_server::handler_fn tool_handler() {
    return [this](const tool_server::request& r) {
      json b = json::parse(r.body, nullptr, false);
      if (!b.is_object()) return std::pair{400, std::string(R"({"error":"bad json"})")};
      std::string key = b.value("job_id", "") + "/" + b.value("call_id", "");
      std::string city = b.contains("arguments") && b["arguments"].is_object() ? b["arguments"].value("city", "?") : "?";
      {
        std::lock_guard lock(effects_mu_);
        effects_[key]++;  // NOTE: counts requests; the side effect is the first one only
      }
      return std::pair{200, json{{"output", "sunny in " + city}}.dump()};
    };
  }
  // The default tool, but the first n_slow calls (-1: every call) take `delay` first (a worker
  // paused, killed or outliving its lease inside a call). Returns the count of calls received.
  std::shared_ptr<std::atomic<int>> slow_tools(std::chrono::milliseconds delay, int n_slow = -1) {
    auto n_calls = std::make_shared<std::atomic<int>>(0);
    tools_.set_handler([n_calls, delay, n_slow, base = tool_handler()](const tool_server::request& r) {
      if (const int k = ++*n_calls; n_slow < 0 || k <= n_slow) std::this_thread::sleep_for(delay);
      return base(r);
    });
    return n_calls;
  }
  tool_server::handler_fn webhook_handler() {
    return [](const tool_server::request&) { return std::pair{200, std::string("{}")}; };
  }

  // Terminal jobs among ids with a webhook whose terminal event the receiver has not seen yet.
  int64_t n_missing_webhooks(const std::vector<std::string>& ids) {
    std::set<std::string> seen;
    for (auto& r : hooks_.requests()) {
      json b = json::parse(r.body, nullptr, false);
      if (b.is_object() && b.contains("data")) seen.insert(b["data"].value("id", "") + " " + b.value("type", ""));
    }
    int64_t n = 0;
    for (auto& id : ids) {
      json j = client_->get_job(id);
      if (j.is_discarded() || j["webhook"].is_null()) continue;
      std::string st = j.value("status", "");
      if (is_terminal_status(st) && !seen.count(id + " job." + st)) n++;
    }
    return n;
  }

 private:
  std::vector<std::string> common_args() const {
    return {(bin_dir() / "agentqd").string(), "--data-dir", data_dir().string(), "--redis",
            "redis://127.0.0.1:" + std::to_string(redis_.port()), "--model", tiny_model().string(),
            "--allow-addresses", "127.0.0.0/8", "--log-level", "info", "--reclaim-idle-ms",
            std::to_string(opts_.reclaim_idle_ms), "--max-deliveries", std::to_string(opts_.max_deliveries)};
  }
  static int count_in(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) n++;
    return n;
  }
  bool wait_for_log_count(child_process& p, const std::string& needle, int n) {
    return p.wait_log(needle, opts_.start_timeout, n);
  }
  void wait_api_ready() {
    net::http_client c(net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", nullptr)));
    auto end = std::chrono::steady_clock::now() + opts_.start_timeout;
    while (std::chrono::steady_clock::now() < end) {
      net::http_request req;
      req.method = "GET";
      req.url = "http://127.0.0.1:" + std::to_string(api_port_) + "/healthz";
      req.timeout = std::chrono::seconds(2);
      auto res = c.send(req);
      if (res.ok() && res.response.status == 200) return;
      if (!api_->running()) throw std::runtime_error("cluster: agentqd --role api exited:\n" + api_->log_text());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("cluster: agentqd --role api did not answer /healthz:\n" + api_->log_text());
  }

  cluster_options opts_;

 public:
  std::mutex effects_mu_;
  std::map<std::string, int> effects_;  // "job_id/call_id" -> requests received (declared before tools_)

 private:
  temp_dir dir_;
  redis_server redis_;
  tool_server tools_;
  tool_server hooks_;
  int api_port_ = 0;
  std::unique_ptr<child_process> api_;
  std::vector<std::unique_ptr<child_process>> workers_;
  std::unique_ptr<client_driver> client_;
  std::string webhook_secret_;
};

}  // namespace agentq::test
