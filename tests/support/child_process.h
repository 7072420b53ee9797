// One child process for fault-injection tests: fork + execve with extra environment, stdout and
// stderr appended to a log file; kill -9, SIGSTOP/SIGCONT, SIGTERM with a grace period, restart
// (same argv; environment changeable between runs), and waits on its exit or on a log line.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace agentq::test {

class child_process {
 public:
  child_process() = default;
  child_process(std::string name, std::vector<std::string> argv, std::filesystem::path log,
                std::map<std::string, std::string> env = {})
      : name_(std::move(name)), argv_(std::move(argv)), log_(std::move(log)), env_(std::move(env)) {}
  ~child_process() { kill9(); }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  const std::filesystem::path& log_path() const { return log_; }
  std::vector<std::string>& argv() { return argv_; }
  // Environment added to the parent's for the next start() (e.g. AGENTQ_FAULT); "" value = unset.
  std::map<std::string, std::string>& env() { return env_; }
  int n_starts() const { return n_starts_; }
  int last_exit() const { return last_exit_; }  // exit code, or 128+signal; -1 = never exited

  void start() {
    if (running()) return;
    // NOTE: argv/envp are built before fork: the test process has threads, so the child only execs.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      std::string k = kv.substr(0, kv.find('='));
      if (!env_.count(k)) env_strings.push_back(kv);
    }
    for (auto& [k, v] : env_)
      if (!v.empty()) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : argv_) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (fd >= 0) ::close(fd);
    n_starts_++;
  }

  // Reaps the child if it exited; true while it runs (a stopped child counts as running).
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      record_exit(status);
      return false;
    }
    return true;
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  void pause() { signal(SIGSTOP); }
  void resume() { signal(SIGCONT); }
  // kill -9 and reap.
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    record_exit(status);
  }
  // SIGTERM (after SIGCONT); SIGKILL if still alive after grace. The exit code (128+sig if killed).
  int terminate(std::chrono::milliseconds grace = std::chrono::seconds(15)) {
    if (pid_ <= 0) return last_exit_;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    if (wait_exit(grace) < 0) kill9();
    return last_exit_;
  }
  // Wait for the child to exit on its own; its exit code, or -1 on timeout (still running).
  int wait_exit(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (running()) {
      if (std::chrono::steady_clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return last_exit_;
  }
  void restart() {
    kill9();
    start();
  }

  std::string log_text() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Wait until the log holds `needle` at least `n` times; false on timeout or if the child exited.
  bool wait_log(const std::string& needle, std::chrono::milliseconds timeout, int n = 1) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::string text = log_text();
      int count = 0;
      for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) count++;
      if (count >= n) return true;
      if (!running() || std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  void record_exit(int status) {
    last_exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
  }

  std::string name_;
  std::vector<std::string> argv_;
  std::filesystem::path log_;
  std::map<std::string, std::string> env_;
  pid_t pid_ = -1;
  int n_starts_ = 0;
  int last_exit_ = -1;
};

}  // namespace agentq::test
