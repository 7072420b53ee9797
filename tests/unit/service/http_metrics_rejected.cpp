// agentq_http_requests_total counts every response, also those the server writes before any
// handler runs (413 body too large, 431 head too large, 400 bad request line): route="rejected"; a
// handler run on the blocking pool (which takes the request along) keeps its method and route.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>

#include "api/http_metrics.h"
#include "http/blocking_pool.h"
#include "http/router.h"
#include "http/server.h"
#include "metrics/registry.h"
#include "raw_socket.h"

using namespace agentq;
using namespace std::chrono_literals;
using test::first_status;
using test::raw_socket;

namespace {

// value of agentq_http_requests_total{method,route,status} in reg (0 when absent)
double n_requests(const metrics::registry& reg, const std::string& method, const std::string& route, int status) {
  for (const auto& f : reg.collect()) {
    if (f.name != "agentq_http_requests_total") continue;
    for (const auto& s : f.samples) {
      metrics::label_list want = {{"method", method}, {"route", route}, {"status", std::to_string(status)}};
      if (s.labels == want) return s.value;
    }
  }
  return 0;
}

int status_of_exchange(uint16_t port, const std::string& bytes) {
  raw_socket c(port);
  REQUIRE(c.send(bytes));
  return first_status(c.read_response(2s));
}

}  // namespace

TEST_CASE("responses rejected before routing are counted in agentq_http_requests_total") {
  metrics::registry reg;
  http::router r;
  r.add("POST", "/echo", [](http::request& req) {
    http::response res;
    res.body = req.body;
    return res;
  });
  http::server_options o;
  o.port = 0;
  o.n_threads = 2;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 2048;
  o.on_rejected = api::rejection_counter(reg);
  http::server srv(o, api::instrumented(r, reg));
  std::string err;
  REQUIRE_MESSAGE(srv.start(&err), err);

  CHECK(status_of_exchange(srv.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi") == 200);
  CHECK(status_of_exchange(srv.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n") == 413);
  CHECK(status_of_exchange(srv.port(), "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n") ==
        431);
  CHECK(status_of_exchange(srv.port(), "NOT A REQUEST LINE\r\n\r\n") == 400);
  srv.stop();

  CHECK(n_requests(reg, "POST", "/echo", 200) == 1);
  // NOTE: these are refused while the head is parsed, before its method is known: "other"
  CHECK(n_requests(reg, "other", "rejected", 413) == 1);
  CHECK(n_requests(reg, "other", "rejected", 431) == 1);
  CHECK(n_requests(reg, "other", "rejected", 400) == 1);
}

TEST_CASE("a handler run on the blocking pool is counted under its method and route") {
  metrics::registry reg;
  http::blocking_pool pool(2);
  http::router r;
  r.add("POST", "/items/{id}", [](http::request& req) {
    http::response res;
    res.status = 201;
    res.body = req.path_param("id");
    return res;
  });
  r.set_pool(&pool);
  http::server_options o;
  o.port = 0;
  o.n_threads = 1;
  http::server srv(o, api::instrumented(r, reg));
  std::string err;
  REQUIRE_MESSAGE(srv.start(&err), err);
  CHECK(status_of_exchange(srv.port(), "POST /items/7 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n") == 201);
  srv.stop();
  pool.stop();
  CHECK(n_requests(reg, "POST", "/items/{id}", 201) == 1);
  CHECK(n_requests(reg, "other", "unmatched", 201) == 0);
}
