// A tiny loopback HTTP/1.1 server for server-side tool tests: one thread, one request per
// connection, a handler from request body to (status, response body); records every request.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace agentq::test {

class tool_server {
 public:
  struct request {
    std::string headers;   // raw header block (lowercase names not guaranteed)
    std::string body;
  };
  using handler_fn = std::function<std::pair<int, std::string>(const request&)>;

  explicit tool_server(handler_fn h) : handler_(std::move(h)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 64);
    thread_ = std::thread([this] { loop(); });
  }
  ~tool_server() {
    running_ = false;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string url(const std::string& path = "/tool") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<request> requests() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void loop() {
    while (running_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }
  void serve(int c) {
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string buf;
    char tmp[4096];
    size_t header_end = std::string::npos;
    size_t content_length = 0;
    for (;;) {
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return;
      buf.append(tmp, n);
      if (header_end == std::string::npos) {
        header_end = buf.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          std::string h = buf.substr(0, header_end);
          for (auto& ch : h) ch = static_cast<char>(std::tolower(ch));
          auto pos = h.find("content-length:");
          if (pos != std::string::npos) content_length = std::stoul(h.substr(pos + 15));
        }
      }
      if (header_end != std::string::npos && buf.size() >= header_end + 4 + content_length) break;
    }
    request r{buf.substr(0, header_end), buf.substr(header_end + 4, content_length)};
    {
      std::lock_guard lock(mu_);
      seen_.push_back(r);
    }
    auto [status, body] = handler_(r);
    std::string resp = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
  }

  handler_fn handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> running_{true};
  std::thread thread_;
  std::mutex mu_;
  std::vector<request> seen_;
};

}  // namespace agentq::test
