// The embedded Redis: agentqd starts its own redis-server (AOF on, noeviction) in the
// data dir on a free loopback port when no --redis URL is given, and restarts it if it dies.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace agentq::daemon {

class redis_supervisor {
 public:
  // dir: where the AOF and log live (created).
  explicit redis_supervisor(std::string dir) : dir_(std::move(dir)) {}
  ~redis_supervisor() { stop(); }

  // Start on a free port and wait for PING; false with *error.
  bool start(std::string* error);
  // SIGTERM, wait (SIGKILL after 5 s), stop supervising.
  void stop();
  int32_t port() const { return port_; }

 private:
  bool spawn(std::string* error);
  bool ping() const;

  std::string dir_;
  int32_t port_ = 0;
  std::mutex mu_;
  pid_t pid_ = -1;
  std::atomic<bool> running_{false};
  std::thread watch_;
};

}  // namespace agentq::daemon
