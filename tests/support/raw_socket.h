// A raw TCP client on loopback for hostile-input tests: send arbitrary bytes (in pieces,
// slowly if asked), read until the server closes or a timeout, and read one response off a
// keep-alive connection. No HTTP library on purpose: the bytes go out exactly as written.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace agentq::test {

class raw_socket {
 public:
  explicit raw_socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~raw_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;

  // false once the peer has closed or reset the connection.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(size_t(n));
    }
    return true;
  }

  // Read until the peer closes (closed = true) or `timeout` passes without it.
  struct until_close {
    std::string bytes;
    bool closed = false;
  };
  until_close read_until_close(std::chrono::milliseconds timeout) {
    until_close out;
    auto end = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) return out;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        out.closed = true;  // EOF or reset: either way the server dropped the connection
        return out;
      }
      out.bytes.append(buf, size_t(n));
    }
  }

  // One response with a Content-Length body off a keep-alive connection; "" on timeout/close.
  std::string read_response(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      size_t head_end = pending_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t body_len = 0;
        size_t cl = lower(pending_.substr(0, head_end)).find("\r\ncontent-length:");
        if (cl != std::string::npos) body_len = std::stoul(pending_.substr(cl + 17));
        if (pending_.size() >= head_end + 4 + body_len) {
          std::string res = pending_.substr(0, head_end + 4 + body_len);
          pending_.erase(0, res.size());
          return res;
        }
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return "";
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return "";
      pending_.append(buf, size_t(n));
    }
  }

 private:
  static std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  int fd_ = -1;
  std::string pending_;
};

// The status code of the first response in `reply` (0 if there is none).
inline int first_status(std::string_view reply) {
  if (reply.size() < 12 || !reply.starts_with("HTTP/1.")) return 0;
  return std::stoi(std::string(reply.substr(9, 3)));
}

}  // namespace agentq::test
