// A real redis-server for one test: started on a free loopback port with AOF (fsync always by default)
// in a temp dir, PING-checked, and stopped + cleaned up in the destructor (also on failure).
// Helpers: kill -9 / restart (same port and data dir: AOF replay), pause (SIGSTOP) / resume,
// and a raw RESP command for setup (FLUSHALL, ...).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace agentq::test {

// A port the kernel just handed out on 127.0.0.1 (free now; tiny race, acceptable in tests).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class redis_server {
 public:
  // Starts immediately; throws std::runtime_error if redis-server doesn't answer PING in 10 s.
  // appendfsync: "always" (default), "everysec" (the production default: may lose ~1 s on kill -9), "no".
  explicit redis_server(bool appendonly = true, std::string appendfsync = "always")
      : port_(free_port()), appendonly_(appendonly), appendfsync_(std::move(appendfsync)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "agentq-redis-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    start();
  }
  ~redis_server() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  void start() {
    if (pid_ > 0) return;
    std::string port = std::to_string(port_);
    std::vector<std::string> args = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir_.string(),
                                     "--appendonly", appendonly_ ? "yes" : "no", "--appendfsync", appendfsync_,
                                     "--save", "", "--daemonize", "no", "--logfile", (dir_ / "redis.log").string()};
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (command({"PING"}) == "+PONG") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    throw std::runtime_error("redis-server did not answer PING on port " + port);
  }

  // Graceful stop (SIGTERM, wait); SIGKILL if it doesn't exit within 5 s.
  void stop() { signal_and_wait(SIGTERM); }
  // kill -9: the AOF keeps what was fsynced.
  void kill9() { signal_and_wait(SIGKILL); }
  void restart() {
    stop();
    start();
  }
  void pause() { if (pid_ > 0) ::kill(pid_, SIGSTOP); }
  void resume() { if (pid_ > 0) ::kill(pid_, SIGCONT); }

  // One command over a fresh connection; the raw first reply line ("+OK", ":1", "$3", "-ERR ...").
  // Empty when the server can't be reached.
  std::string command(const std::vector<std::string>& argv) const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return {};
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    std::string line;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::string req = "*" + std::to_string(argv.size()) + "\r\n";
      for (auto& s : argv) req += "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
      if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
        char c;
        while (::recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
        if (!line.empty() && line.back() == '\r') line.pop_back();
      }
    }
    ::close(fd);
    return line;
  }

 private:
  void signal_and_wait(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    for (int i = 0; i < 500; ++i) {
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port_;
  bool appendonly_;
  std::string appendfsync_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

}  // namespace agentq::test
