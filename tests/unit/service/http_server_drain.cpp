// The HTTP server after an error and at shutdown: a throwing handler answers 500 and the
// pipelined next request is still served; an error answered before a large body was read
// still reaches the client (the server drains the unread bytes instead of resetting);
// stop() lets an in-flight request finish writing, closes idle keep-alive connections
// at once, is not held up by a client that vanished mid-response, and ends an open event
// stream (SSE) at once instead of waiting out the drain.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "http_test_server.h"
#include "raw_socket.h"

using namespace agentq;
using namespace std::chrono_literals;
using test::first_status;
using test::raw_socket;

using test::small_limits;

namespace {

// Value of a response header in `reply` ("" if absent); names compare case-sensitively.
std::string header_of(const std::string& reply, const std::string& name) {
  size_t at = reply.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  at += name.size() + 4;
  return reply.substr(at, reply.find("\r\n", at) - at);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a throwing handler answers 500 and the pipelined next request is served") {
  test::http_test_server s(small_limits());
  s.routes.add("GET", "/throw", [](http::request&) -> http::response { throw std::runtime_error("boom"); });
  raw_socket c(s.port());
  REQUIRE(
      c.send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"));
  auto reply = c.read_until_close(3s);
  CHECK(reply.closed);
  CHECK(first_status(reply.bytes) == 500);
  size_t second = reply.bytes.find("HTTP/1.1 ", 1);
  REQUIRE(second != std::string::npos);
  CHECK(first_status(reply.bytes.substr(second)) == 200);
  CHECK(reply.bytes.ends_with("\r\n\r\nok"));
}

TEST_CASE("an error answered before a large body was read still reaches the client") {
  test::http_test_server s(small_limits());
  // NOTE: closing a socket with unread input makes the kernel send RST, which can throw
  // away the 413 before the client reads it; the server must drain (read and drop) first.
  const std::string body(4 << 20, 'a');
  for (int i = 0; i < 5; ++i) {
    INFO("try " << i);
    raw_socket c(s.port());
    auto sender = std::async(std::launch::async, [&] {
      return c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                    body);
    });
    auto reply = c.read_until_close(5s);
    sender.get();  // may have failed once the server closed: only the reply matters
    CHECK(first_status(reply.bytes) == 413);
    CHECK(reply.closed);
  }
}

TEST_CASE("stop() lets an in-flight request finish writing its response") {
  test::http_test_server s(small_limits());
  std::atomic<bool> entered{false};
  const size_t n_body = 8 << 20;  // larger than the socket buffers: needs many write completions
  s.routes.add("GET", "/slow_big", [&](http::request&) {
    entered = true;
    std::this_thread::sleep_for(300ms);
    http::response res;
    res.content_type = "text/plain";
    res.body = std::string(n_body, 'b');
    return res;
  });
  raw_socket c(s.port());
  REQUIRE(c.send("GET /slow_big HTTP/1.1\r\nHost: x\r\n\r\n"));
  while (!entered) std::this_thread::sleep_for(5ms);
  auto t0 = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { s.srv->stop(); });
  auto reply = c.read_until_close(10s);
  stopped.get();
  CHECK(reply.closed);
  CHECK(first_status(reply.bytes) == 200);
  CHECK(header_of(reply.bytes, "Connection") == "close");
  size_t head_end = reply.bytes.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  CHECK(reply.bytes.size() - head_end - 4 == n_body);
  MESSAGE("stop() with an 8 MiB response in flight took " << seconds_since(t0) << " s");
}

TEST_CASE("stop() finishes a request whose body is still arriving") {
  test::http_test_server s(small_limits());
  raw_socket c(s.port());
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello"));
  std::this_thread::sleep_for(100ms);  // the head is read; the body waits for 5 more bytes
  auto stopped = std::async(std::launch::async, [&] { s.srv->stop(); });
  std::this_thread::sleep_for(100ms);
  REQUIRE(c.send("world"));
  auto reply = c.read_until_close(3s);
  stopped.get();
  CHECK(first_status(reply.bytes) == 200);
  CHECK(reply.bytes.ends_with("\r\n\r\nhelloworld"));
  CHECK(reply.closed);
}

TEST_CASE("stop() closes idle keep-alive connections at once") {
  auto o = small_limits();
  o.header_timeout = 10s;  // so only stop() can close the idle connection in time
  test::http_test_server s(o);
  raw_socket c(s.port());
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
  CHECK(first_status(c.read_response(2s)) == 200);
  auto t0 = std::chrono::steady_clock::now();
  s.srv->stop();
  CHECK(seconds_since(t0) < 1.0);
  CHECK(c.read_until_close(2s).closed);
}

TEST_CASE("a client gone mid-response (write error) does not hold up stop()") {
  auto o = small_limits();
  o.write_timeout = 10s;
  test::http_test_server s(o);
  std::atomic<bool> answered{false};
  s.routes.add("GET", "/big", [&](http::request&) {
    http::response res;
    res.body = std::string(16 << 20, 'x');
    answered = true;
    return res;
  });
  {
    raw_socket c(s.port());
    REQUIRE(c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
    while (!answered) std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(50ms);
  }  // closed without reading: the server's write fails (reset)
  auto t0 = std::chrono::steady_clock::now();
  s.srv->stop();
  CHECK(seconds_since(t0) < 2.0);
  CHECK(s.srv->stats().n_connections == 0);
}

TEST_CASE("stop() ends an open event stream promptly (no full drain wait)") {
  auto o = small_limits();
  o.drain_timeout = 10s;
  test::http_test_server s(o);
  std::atomic<bool> streaming{false};
  s.routes.add("GET", "/stream", [&](http::request&) {
    http::response res;
    res.content_type = "text/event-stream";
    res.stream = [&](http::stream_sink& out) {
      streaming = true;
      while (!out.closed()) std::this_thread::sleep_for(20ms);  // a producer with nothing to send
    };
    return res;
  });
  raw_socket c(s.port());
  REQUIRE(c.send("GET /stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"));
  while (!streaming) std::this_thread::sleep_for(5ms);
  auto t0 = std::chrono::steady_clock::now();
  s.srv->stop();
  CHECK(seconds_since(t0) < 1.0);
  CHECK(c.read_until_close(2s).closed);
}
