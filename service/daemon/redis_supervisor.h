// The embedded Redis: agentqd starts its own redis-server (AOF on, noeviction) in the
// data dir on a free loopback port when no --redis URL is given, and restarts it if it dies.
// One redis-server per directory: the supervising agentqd holds DIR/agentqd-redis.lock (flock), so
// a second agentqd on the same dir refuses to start instead of running a second server; the pid
// is kept in DIR/agentqd-redis.pid, and one left by an agentqd that died is stopped at start; the
// child dies with agentqd (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace agentq::daemon {

class redis_supervisor {
 public:
  // dir: where the AOF and log live (created).
  explicit redis_supervisor(std::string dir) : dir_(std::move(dir)) {}
  ~redis_supervisor();

  // Take the directory's lock (false with *error if another agentqd holds it), stop a live
  // redis-server named by the pid file, start on a free port and wait for PING; false with *error.
  bool start(std::string* error);
  // SIGTERM, wait (SIGKILL after 5 s), stop supervising.
  void stop();
  int32_t port() const { return port_; }

 private:
  bool spawn(std::string* error);
  bool ping() const;
  std::string pid_file() const;
  // SIGTERM (SIGKILL after 10 s) a live redis-server left on dir_ by an earlier agentqd
  void stop_stale();

  std::string dir_;
  int32_t port_ = 0;
  std::mutex mu_;
  pid_t pid_ = -1;
  int lock_fd_ = -1;  // DIR/agentqd-redis.lock, flock'ed while this supervisor owns the directory
  std::atomic<bool> running_{false};
  std::condition_variable stop_cv_;  // (with mu_) wakes the watch at stop(): no 200 ms tick to wait out
  std::thread watch_;
};

}  // namespace agentq::daemon
