// The HTTP server over loopback: keep-alive, deferred answers, limits (413/431), smuggling shapes, slowloris
// timeout, bad UTF-8 bodies reaching the handler; and http_client against it (no redirects,
// response size limit, timeout, SSRF refusal).
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "http/errors.h"
#include "http_test_server.h"
#include "net/http_client.h"
#include "raw_socket.h"

using namespace agentq;

namespace {

http::server_options small_limits() {
  auto o = test::small_limits();
  o.header_timeout = std::chrono::milliseconds(400);
  return o;
}

struct fixture : test::http_test_server {
  fixture() : http_test_server(small_limits()) {
    auto& r = routes;
    r.add("GET", "/redirect", [](http::request&) {
      http::response res;
      res.status = 302;
      res.headers.emplace_back("Location", "http://127.0.0.1:1/elsewhere");
      return res;
    });
    r.add("GET", "/big", [](http::request&) {
      http::response res;
      res.body = std::string(100000, 'x');
      return res;
    });
    r.add("GET", "/slow", [](http::request&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return http::response{};
    });
  }

  // Send raw bytes, read until the peer closes or wait_ms pass; the whole reply.
  std::string raw(const std::string& bytes, int wait_ms = 2000) {
    test::raw_socket s(port());
    s.send(bytes);
    return s.read_until_close(std::chrono::milliseconds(wait_ms)).bytes;
  }
};

int status_of(const std::string& reply) { return test::first_status(reply); }

net::http_client loopback_client() {
  std::string err;
  return net::http_client(net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", &err)));
}

}  // namespace

TEST_CASE("keep-alive: two requests on one connection") {
  fixture f;
  std::string two = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
                    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye";
  std::string reply = f.raw(two);
  CHECK(reply.find("\r\n\r\nhi") != std::string::npos);
  CHECK(reply.find("\r\n\r\nbye") != std::string::npos);
}

TEST_CASE("deferred answers: made on the io thread after the reply, in request order, others served meanwhile") {
  fixture f;
  // /later answers from another thread 300 ms on (as the store's writer does after its commit); the
  // body is made by the function the reply carries, on the connection's io thread.
  std::vector<std::thread> repliers;
  std::mutex mu;
  f.routes.add("POST", "/later", [&](http::request& req) {
    http::response res;
    res.deferred = [&, body = req.body](http::reply_fn reply) {
      std::lock_guard lock(mu);
      repliers.emplace_back([reply, body] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        reply([body] {
          http::response r;
          r.status = 202;
          r.content_type = "text/plain";
          r.body = "later:" + body;
          return r;
        });
        reply([] { return http::response{}; });  // a second reply is ignored
      });
    };
    return res;
  });
  // Pipelined: the deferred answer comes first, then the echo, on one connection.
  auto t0 = std::chrono::steady_clock::now();
  std::string reply = f.raw("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
                            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye");
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(300));
  CHECK(status_of(reply) == 202);
  size_t later = reply.find("later:ab"), echo = reply.find("\r\n\r\nbye");
  CHECK(later != std::string::npos);
  CHECK(echo != std::string::npos);
  CHECK(later < echo);
  // While an answer is deferred, the io threads serve other connections (two io threads, four waits).
  std::vector<std::thread> clients;
  std::atomic<int> n_ok{0};
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&] {
      if (status_of(f.raw("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")) == 202)
        ++n_ok;
    });
  for (auto& c : clients) c.join();
  CHECK(n_ok == 4);
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::milliseconds(1100));  // not 4 x 300 ms in a row
  std::lock_guard lock(mu);
  for (auto& t : repliers) t.join();
}

TEST_CASE("limits and smuggling shapes") {
  fixture f;
  CHECK(status_of(f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")) == 413);
  CHECK(status_of(f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                        std::string("800\r\n") + std::string(2048, 'a') + "\r\n0\r\n\r\n")) == 413);
  CHECK(status_of(f.raw("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n")) == 431);
  CHECK(status_of(f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi")) == 400);
  CHECK(status_of(f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "2\r\nhi\r\n0\r\n\r\n")) == 400);
  CHECK(status_of(f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")) == 501);
  CHECK(status_of(f.raw("GARBAGE\r\n\r\n")) == 400);
  std::string reply = f.raw("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 600);
  CHECK(status_of(reply) == 404);
  CHECK(reply.find("\"not_found_error\"") != std::string::npos);
  CHECK(f.srv->stats().n_rejected >= 6);
}

TEST_CASE("slowloris: a dribbled request head is cut off by the header timeout") {
  fixture f;
  auto t0 = std::chrono::steady_clock::now();
  std::string reply = f.raw("GET /echo HTTP/1.1\r\nHost: x\r\n", 3000);  // never finishes the head
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(reply.empty());
  CHECK(s < 2.0);
}

TEST_CASE("http_client: POST, redirects not followed, size limit, timeout, SSRF") {
  fixture f;
  auto client = loopback_client();
  net::http_request req;
  req.url = f.url("/echo");
  req.body = "payload";
  auto res = client.send(req);
  REQUIRE_MESSAGE(res.ok(), res.message);
  CHECK(res.response.status == 200);
  CHECK(res.response.body == "payload");

  req = {};
  req.method = "GET";
  req.url = f.url("/redirect");
  res = client.send(req);
  REQUIRE(res.ok());
  CHECK(res.response.status == 302);
  CHECK(res.response.header("location") == "http://127.0.0.1:1/elsewhere");

  req.url = f.url("/big");
  req.max_response_bytes = 1000;
  res = client.send(req);
  CHECK(res.error == net::http_error::response_too_large);

  req.url = f.url("/slow");
  req.timeout = std::chrono::milliseconds(200);
  res = client.send(req);
  CHECK(res.error == net::http_error::timeout);

  net::http_client strict{net::ssrf_guard{}};
  req.url = f.url("/echo");
  res = strict.send(req);
  CHECK(res.error == net::http_error::blocked_address);

  req.url = "http://127.0.0.1:1/";  // nothing listens on port 1
  req.timeout = std::chrono::milliseconds(2000);
  res = client.send(req);
  CHECK(res.error == net::http_error::connect_failed);
}
