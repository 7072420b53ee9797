// Embedded redis-server: spawn, PING, watch and restart (see redis_supervisor.h).
#include "daemon/redis_supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace agentq::daemon {

namespace {
int32_t pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// true while pid is a live (not zombie) redis-server working in dir (redis chdirs to its --dir
// and rewrites its command line, so comm and cwd identify it, not a reused pid)
bool is_live_redis(pid_t pid, const std::string& dir) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream stat(proc + "/stat");
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  if (rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] == 'Z') return false;
  std::ifstream comm_in(proc + "/comm");
  std::string comm;
  std::getline(comm_in, comm);
  std::error_code ec;
  auto cwd = std::filesystem::read_symlink(proc + "/cwd", ec);
  return comm == "redis-server" && !ec && std::filesystem::equivalent(cwd, dir, ec);
}
}  // namespace

std::string redis_supervisor::pid_file() const { return dir_ + "/agentqd-redis.pid"; }

void redis_supervisor::stop_stale() {
  std::ifstream in(pid_file());
  pid_t pid = -1;
  if (!(in >> pid) || !is_live_redis(pid, dir_)) return;
  // NOTE: stopped, not adopted: a process that is not our child cannot be waited for or
  // supervised, and SIGTERM makes it flush its AOF, so the new one loses nothing.
  spdlog::warn("redis: a redis-server (pid {}) from an earlier agentqd still runs on {}; stopping it", pid, dir_);
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 500 && is_live_redis(pid, dir_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (is_live_redis(pid, dir_)) {
    spdlog::warn("redis: pid {} ignored SIGTERM for 10 s; SIGKILL", pid);
    ::kill(pid, SIGKILL);
    for (int i = 0; i < 250 && is_live_redis(pid, dir_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool redis_supervisor::ping() const {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port_));
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const char req[] = "*1\r\n$4\r\nPING\r\n";
    char buf[16] = {};
    if (::send(fd, req, sizeof req - 1, MSG_NOSIGNAL) > 0 && ::recv(fd, buf, sizeof buf - 1, 0) > 0)
      ok = std::string(buf).starts_with("+PONG");
  }
  ::close(fd);
  return ok;
}

bool redis_supervisor::spawn(std::string* error) {
  std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--dir", dir_, "--appendonly", "yes", "--appendfsync", "everysec",
                                   "--maxmemory-policy", "noeviction", "--save", "", "--daemonize", "no",
                                   "--protected-mode", "yes", "--logfile", dir_ + "/redis.log"};
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    if (error) *error = "fork failed";
    return false;
  }
  if (pid == 0) {
    // agentqd blocks SIGTERM/SIGINT in every thread (it sigwaits them); a mask and handlers
    // survive exec, so give redis-server an empty mask and default dispositions.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
    // die with agentqd (even SIGKILLed); NOTE: the signal fires when the forking *thread*
    // exits, which is the main thread or the watch thread -- both live as long as supervision.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    ::setpgid(0, 0);  // NOTE: own process group, so a terminal's Ctrl-C reaches agentqd only
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  {
    std::ofstream pf(pid_file(), std::ios::trunc);
    pf << pid << "\n";
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ping()) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (error) *error = "redis-server exited at start (is it installed? see " + dir_ + "/redis.log)";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (error) *error = "redis-server did not answer PING on port " + std::to_string(port_);
  return false;
}

redis_supervisor::~redis_supervisor() {
  stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

bool redis_supervisor::start(std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  // NOTE: the lock tells a live owner from a dead one: a pid file alone cannot (a second agentqd
  // would stop the first one's redis-server). O_CLOEXEC keeps it out of redis-server; the kernel
  // drops it when this process dies, however it dies.
  const std::string lock_path = dir_ + "/agentqd-redis.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (error)
      *error = lock_fd_ < 0 ? "cannot open " + lock_path + ": " + std::strerror(errno)
                            : "another agentqd is running the embedded Redis in " + dir_ +
                                  " (it holds agentqd-redis.lock); stop it first, or give this one its own --data-dir "
                                  "or a --redis URL";
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    return false;
  }
  stop_stale();
  port_ = pick_free_port();
  {
    std::lock_guard lock(mu_);
    if (!spawn(error)) return false;
  }
  running_ = true;
  spdlog::info("redis: embedded redis-server pid {} on 127.0.0.1:{} (AOF in {})", pid_, port_, dir_);
  watch_ = std::thread([this] {
    while (running_) {
      std::unique_lock lock(mu_);
      stop_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return !running_; });
      if (!running_ || pid_ <= 0) continue;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        spdlog::error("redis: embedded redis-server exited (status {}); restarting on port {}", status, port_);
        pid_ = -1;
        std::string err;
        if (!spawn(&err)) spdlog::error("redis: restart failed: {}", err);
      }
    }
  });
  return true;
}

void redis_supervisor::stop() {
  {
    std::lock_guard lock(mu_);  // NOTE: under the watch's lock: it cannot miss the wake between its check and its wait
    running_ = false;
  }
  stop_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
  std::lock_guard lock(mu_);
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 250; ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::error_code ec;
      std::filesystem::remove(pid_file(), ec);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  std::error_code ec;
  std::filesystem::remove(pid_file(), ec);
}

}  // namespace agentq::daemon
