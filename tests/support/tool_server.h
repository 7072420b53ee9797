// A tiny loopback HTTP/1.1 server for tests (server-side tools, webhook receivers): one thread per
// connection (a hanging handler blocks only its own client), one request per connection, a handler
// from request to (status, response body) that can be swapped at run time; records every request
// with its method, path and arrival time (wall-clock ms).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace agentq::test {

class tool_server {
 public:
  struct request {
    std::string headers;   // raw header block (request line first; names as sent)
    std::string body;
    std::string method, path;
    int64_t t_ms = 0;      // arrival, wall clock (comparable with SQLite *_ms columns)

    // First header with this name (case-insensitive), or "".
    std::string header(std::string name) const {
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      size_t pos = 0;
      while ((pos = headers.find("\r\n", pos)) != std::string::npos) {
        pos += 2;
        size_t colon = headers.find(':', pos), eol = headers.find("\r\n", pos);
        if (colon == std::string::npos || (eol != std::string::npos && colon > eol)) continue;
        std::string n = headers.substr(pos, colon - pos);
        std::transform(n.begin(), n.end(), n.begin(), ::tolower);
        if (n != name) continue;
        std::string v = headers.substr(colon + 1, (eol == std::string::npos ? headers.size() : eol) - colon - 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        return v;
      }
      return {};
    }
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
    ::listen(fd_, 256);
    thread_ = std::thread([this] { loop(); });
  }
  ~tool_server() {
    running_ = false;
    thread_.join();
    std::list<std::thread> conns;
    {
      std::lock_guard lock(mu_);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();  // NOTE: a handler that hangs must return for this to finish
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
  // Replace the handler (e.g. a webhook receiver that starts failing, then recovers).
  void set_handler(handler_fn h) {
    std::lock_guard lock(mu_);
    handler_ = std::move(h);
  }

 private:
  void loop() {
    while (running_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::lock_guard lock(mu_);
      conns_.emplace_back([this, c] {
        serve(c);
        ::close(c);
      });
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
    request r;
    r.headers = buf.substr(0, header_end);
    r.body = buf.substr(header_end + 4, content_length);
    size_t sp1 = r.headers.find(' '), sp2 = r.headers.find(' ', sp1 + 1);
    if (sp1 != std::string::npos) r.method = r.headers.substr(0, sp1);
    if (sp2 != std::string::npos) r.path = r.headers.substr(sp1 + 1, sp2 - sp1 - 1);
    r.t_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    handler_fn h;
    {
      std::lock_guard lock(mu_);
      seen_.push_back(r);
      h = handler_;
    }
    auto [status, body] = h(r);
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
  std::list<std::thread> conns_;
  std::vector<request> seen_;
};

}  // namespace agentq::test
