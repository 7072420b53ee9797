// Hostile clients against the real HTTP server over loopback (raw sockets): every
// oversized, smuggling-shaped or badly chunked request gets one clean 4xx/5xx and the
// connection closes (a smuggled second request is never answered); slowloris heads and
// bodies are cut by the read timeouts; and all the while a well-behaved keep-alive client
// on another connection keeps being served. (tests/unit/service/http_server.cpp has the
// basic limits; tests/unit/service/http_request_parse.cpp the same shapes without sockets.)
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "http_test_server.h"
#include "raw_socket.h"

using namespace agentq;
using namespace std::chrono_literals;
using test::first_status;
using test::raw_socket;

namespace {

http::server_options hostile_limits() {
  http::server_options o;
  o.n_threads = 2;
  o.max_body_bytes = 64 << 10;
  o.max_header_bytes = 4 << 10;
  o.header_timeout = 500ms;
  o.body_timeout = 800ms;
  return o;
}

struct fixture : test::http_test_server {
  std::atomic<int> n_smuggled{0};  // requests that reached /smuggled (must stay 0)

  fixture() : http_test_server(hostile_limits()) {
    auto& r = routes;
    r.add("GET", "/ping", [](http::request&) {
      http::response res;
      res.body = "{\"ok\":true}";
      return res;
    });
    r.add("GET", "/smuggled", [this](http::request&) {
      ++n_smuggled;
      return http::response{};
    });
  }
};

// A well-behaved client: GET /ping on one keep-alive connection in a loop until stopped.
struct good_client {
  std::atomic<bool> stop{false};
  std::atomic<int> n_ok{0}, n_bad{0};
  std::atomic<int64_t> max_latency_us{0};
  std::thread t;

  explicit good_client(uint16_t port) {
    t = std::thread([this, port] {
      raw_socket s(port);
      while (!stop) {
        auto t0 = std::chrono::steady_clock::now();
        bool sent = s.send("GET /ping HTTP/1.1\r\nHost: good\r\n\r\n");
        std::string res = sent ? s.read_response(3s) : "";
        int64_t us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        if (first_status(res) == 200 && res.ends_with("{\"ok\":true}")) {
          ++n_ok;
          if (us > max_latency_us) max_latency_us = us;
        } else {
          ++n_bad;
          return;  // the keep-alive connection is gone: that is the failure we look for
        }
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  ~good_client() { finish(); }
  void finish() {
    stop = true;
    if (t.joinable()) t.join();
  }
};

struct shape {
  const char* name;
  std::string bytes;
  int status;
};

std::vector<shape> hostile_shapes() {
  const std::string post = "POST /echo HTTP/1.1\r\nHost: x\r\n";
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  return {
      {"body over the limit (Content-Length)", post + "Content-Length: 70000\r\n\r\n" + std::string(1000, 'a'), 413},
      {"body over the limit (chunked)",
       post + "Transfer-Encoding: chunked\r\n\r\n" + "8000\r\n" + std::string(32768, 'a') + "\r\n8000\r\n" +
           std::string(32768, 'a') + "\r\n10\r\n" + std::string(16, 'a') + "\r\n0\r\n\r\n",
       413},
      {"one header over the limit", "GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n",
       431},
      {"many small headers over the limit",
       [] {
         std::string s = "GET /ping HTTP/1.1\r\nHost: x\r\n";
         for (int i = 0; i < 700; ++i) s += "X-" + std::to_string(i) + ": v\r\n";
         return s + "\r\n";
       }(),
       431},
      {"Content-Length with Transfer-Encoding (CL.TE)",
       post + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
      {"Transfer-Encoding with Content-Length (TE.CL)",
       post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n1\r\nx\r\n0\r\n\r\n" + smuggled, 400},
      {"duplicate Content-Length", post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nhi" + smuggled, 400},
      {"conflicting Content-Length", post + "Content-Length: 2\r\nContent-Length: 40\r\n\r\nhi" + smuggled, 400},
      {"Content-Length list", post + "Content-Length: 2, 2\r\n\r\nhi" + smuggled, 400},
      {"Content-Length with a sign", post + "Content-Length: +2\r\n\r\nhi" + smuggled, 400},
      {"Transfer-Encoding list (gzip, chunked)", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled,
       501},
      {"two Transfer-Encoding headers",
       post + "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
      {"Transfer-Encoding in HTTP/1.0", "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
       400},
      {"obs-fold header continuation", "GET /ping HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n" + smuggled, 400},
      {"obs-fold hiding Transfer-Encoding",
       post + "Content-Length: 2\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\nhi" + smuggled, 400},
      {"space before the colon", post + "Content-Length : 2\r\n\r\nhi" + smuggled, 400},
      {"bad chunk size (not hex)", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n0\r\n\r\n" + smuggled, 400},
      {"bad chunk size (negative)", post + "Transfer-Encoding: chunked\r\n\r\n-2\r\nhi\r\n0\r\n\r\n" + smuggled, 400},
      {"bad chunk size (64-bit overflow)",
       post + "Transfer-Encoding: chunked\r\n\r\n10000000000000002\r\nhi\r\n0\r\n\r\n" + smuggled, 400},
      {"chunk longer than its size", post + "Transfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n" + smuggled,
       400},
      {"chunk size with 0x prefix", post + "Transfer-Encoding: chunked\r\n\r\n0x2\r\nhi\r\n0\r\n\r\n" + smuggled, 400},
      {"bare LF line endings", "GET /ping HTTP/1.1\nHost: x\n\n" + smuggled, 400},
      {"garbage request line", "\x16\x03\x01\x02\x05\x01\x07\x01\xfc\x03\x03\r\n\r\n" + smuggled, 400},
      {"HTTP/2.0 version", "GET /ping HTTP/2.0\r\nHost: x\r\n\r\n" + smuggled, 400},
      {"NUL in a header value", std::string("GET /ping HTTP/1.1\r\nX: a\0b\r\n\r\n", 30) + smuggled, 400},
  };
}

}  // namespace

TEST_CASE("hostile request shapes: one clean 4xx each, connection closed, good client served") {
  fixture f;
  good_client good(f.srv->port());
  raw_socket keep(f.srv->port());  // and one more keep-alive client, asked after every shape
  for (const shape& s : hostile_shapes()) {
    INFO(std::string(s.name));
    raw_socket bad(f.srv->port());
    bad.send(s.bytes);  // may fail part-way once the server has answered and closed
    auto reply = bad.read_until_close(3s);
    CHECK(first_status(reply.bytes) == s.status);
    CHECK(reply.closed);
    CHECK(reply.bytes.find("Connection: close") != std::string::npos);
    CHECK(reply.bytes.find("{\"error\":{") != std::string::npos);
    // exactly one response: nothing after the rejection was read as another request
    CHECK(reply.bytes.find("\nHTTP/1.") == std::string::npos);
    REQUIRE(keep.send("GET /ping HTTP/1.1\r\nHost: good\r\n\r\n"));
    CHECK(first_status(keep.read_response(2s)) == 200);
  }
  std::this_thread::sleep_for(50ms);
  good.finish();
  CHECK(f.n_smuggled == 0);
  CHECK(good.n_bad == 0);
  CHECK(good.n_ok > 0);
  CHECK(f.srv->stats().n_rejected >= int64_t(hostile_shapes().size()));
  MESSAGE("good client: " << good.n_ok.load() << " requests, max latency " << good.max_latency_us / 1000.0 << " ms");
}

TEST_CASE("slowloris: dribbled heads and bodies are cut by the read timeouts; good client served") {
  fixture f;
  good_client good(f.srv->port());
  constexpr int k_n_slow = 16;
  std::vector<std::thread> slow;
  std::atomic<int> n_cut{0};
  std::atomic<int64_t> max_cut_ms{0};
  for (int i = 0; i < k_n_slow; ++i) {
    slow.emplace_back([&, i] {
      raw_socket s(f.srv->port());
      // half dribble a head (never finished), half a body that never completes
      std::string bytes = i % 2 == 0
                              ? "GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'a')
                              : "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n" + std::string(200, 'a');
      auto t0 = std::chrono::steady_clock::now();
      size_t at = 0;
      bool open = true;
      while (open && at < bytes.size() && std::chrono::steady_clock::now() - t0 < 5s) {
        size_t step = at == 0 && i % 2 == 1 ? bytes.find("\r\n\r\n") + 4 : 1;  // the body case sends its head at once
        open = s.send(std::string_view(bytes).substr(at, step));
        at += step;
        auto r = s.read_until_close(50ms);  // one byte per ~50 ms
        if (r.closed) open = false;
      }
      if (!open || s.read_until_close(3s).closed) {
        ++n_cut;
        int64_t ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        if (ms > max_cut_ms) max_cut_ms = ms;
      }
    });
  }
  for (auto& t : slow) t.join();
  good.finish();
  CHECK(n_cut == k_n_slow);
  CHECK(max_cut_ms < 2500);  // header 500 ms / body 800 ms timeouts plus scheduling slack
  CHECK(good.n_bad == 0);
  CHECK(good.n_ok > 10);
  MESSAGE("slowloris: " << n_cut.load() << "/" << k_n_slow << " cut, slowest after " << max_cut_ms.load()
                        << " ms; good client " << good.n_ok.load() << " requests, max latency "
                        << good.max_latency_us / 1000.0 << " ms");
}
