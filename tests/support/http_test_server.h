// A real http::server on a free loopback port for tests of the server itself: the test
// adds routes to `routes` (they may be added after start) and talks to it with
// raw_socket.h or net::http_client. Shared so the server tests do not each copy it.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "http/router.h"
#include "http/server.h"

namespace agentq::test {

// Two io threads, 1 KiB bodies, 2 KiB heads: limits a test reaches with a few bytes.
inline http::server_options small_limits() {
  http::server_options o;
  o.n_threads = 2;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 2048;
  return o;
}

struct http_test_server {
  http::router routes;
  std::unique_ptr<http::server> srv;

  // The server on a free port (o.port is ignored) with POST /echo (body back as text/plain).
  explicit http_test_server(http::server_options o) {
    routes.add("POST", "/echo", [](http::request& req) {
      http::response res;
      res.content_type = "text/plain";
      res.body = req.body;
      return res;
    });
    o.port = 0;
    srv = std::make_unique<http::server>(o, [this](http::request& req) { return routes.dispatch(req); });
    std::string err;
    REQUIRE_MESSAGE(srv->start(&err), err);
  }
  ~http_test_server() { srv->stop(); }
  http_test_server(const http_test_server&) = delete;
  http_test_server& operator=(const http_test_server&) = delete;

  uint16_t port() const { return srv->port(); }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port()) + path; }
};

}  // namespace agentq::test
