// The router's blocking pool over loopback (http/blocking_pool.h): with one io thread, a handler
// blocked on the pool leaves the io thread serving other connections; the request reaches the
// handler whole; answers keep their order on a connection; a throw, a deferred answer and a stream
// pass through; an upload stays readable until the answer is made; a stopped pool answers 503; its
// load (busy, queued) as /metrics reads it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "http/blocking_pool.h"
#include "http/router.h"
#include "http/server.h"
#include "raw_socket.h"

using namespace agentq;
using namespace std::chrono_literals;

namespace {

int status_of(const std::string& reply) { return test::first_status(reply); }

// A gate a handler waits at until the test opens it.
struct gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, waiting = false;
  void wait() {
    std::unique_lock lock(mu);
    waiting = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  bool wait_until_waiting(std::chrono::milliseconds d) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, d, [&] { return waiting; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

struct fixture {
  http::router routes;
  http::blocking_pool pool{4};
  std::unique_ptr<http::server> srv;
  gate g;
  std::filesystem::path upload_dir;
  std::string seen_upload;  // the path the upload handler read

  fixture() {
    upload_dir = std::filesystem::temp_directory_path() / ("aq-pool-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(upload_dir);
    routes.add("GET", "/fast", [](http::request&) {
      http::response res;
      res.content_type = "text/plain";
      res.body = "fast";
      return res;
    }, http::runs_on::io);
    routes.add("POST", "/blocked/{name}", [this](http::request& req) {
      g.wait();
      http::response res;
      res.content_type = "text/plain";
      res.body = req.method + " " + req.path + " " + req.path_param("name") + " " + req.header("x-tag") + " " + req.body;
      return res;
    });
    routes.add("POST", "/echo", [](http::request& req) {
      http::response res;
      res.content_type = "text/plain";
      res.body = "echo:" + req.body;
      return res;
    });
    routes.add("GET", "/throws", [](http::request&) -> http::response { throw std::runtime_error("boom"); });
    routes.add("GET", "/deferred", [](http::request&) {
      http::response res;
      res.deferred = [](http::reply_fn reply) {
        std::thread([reply] {
          std::this_thread::sleep_for(50ms);
          reply([] {
            http::response r;
            r.status = 202;
            r.content_type = "text/plain";
            r.body = "deferred-ok";
            return r;
          });
        }).detach();
      };
      return res;
    });
    routes.add("GET", "/stream", [](http::request&) {
      http::response res;
      res.content_type = "text/event-stream";
      res.stream = [](http::stream_sink& out) {
        out.write("data: one\n\n");
        out.write("data: two\n\n");
      };
      return res;
    });
    routes.add("POST", "/upload", [this](http::request& req) {
      seen_upload = req.body_file;
      std::ifstream in(req.body_file);
      std::stringstream ss;
      ss << in.rdbuf();
      http::response res;
      res.content_type = "text/plain";
      res.body = "upload:" + ss.str();
      return res;
    });
    routes.set_pool(&pool);
    http::server_options o;
    o.port = 0;
    o.n_threads = 1;  // one io thread: a handler blocking it would stall every other connection
    o.upload_path = "/upload";
    o.upload_dir = upload_dir.string();
    srv = std::make_unique<http::server>(o, [this](http::request& req) { return routes.dispatch(req); });
    std::string err;
    REQUIRE_MESSAGE(srv->start(&err), err);
  }
  ~fixture() {
    g.release();
    srv->stop();
    pool.stop();
    std::error_code ec;
    std::filesystem::remove_all(upload_dir, ec);
  }

  std::string raw(const std::string& bytes, int wait_ms = 3000) {
    test::raw_socket s(srv->port());
    s.send(bytes);
    return s.read_until_close(std::chrono::milliseconds(wait_ms)).bytes;
  }
};

}  // namespace

TEST_CASE("blocking pool: a blocked handler leaves the one io thread serving; the request arrives whole") {
  fixture f;
  std::string blocked_reply;
  std::thread blocked([&] {
    blocked_reply = f.raw("POST /blocked/abc HTTP/1.1\r\nHost: x\r\nX-Tag: t1\r\nContent-Length: 4\r\n"
                          "Connection: close\r\n\r\nbody");
  });
  REQUIRE(f.g.wait_until_waiting(3000ms));
  // The handler is parked on a pool thread; the io thread answers others meanwhile.
  auto t0 = std::chrono::steady_clock::now();
  std::string fast = f.raw("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(status_of(fast) == 200);
  CHECK(fast.find("\r\n\r\nfast") != std::string::npos);
  std::string echo = f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
  CHECK(echo.find("echo:hi") != std::string::npos);  // another pool handler runs beside the blocked one
  CHECK(std::chrono::steady_clock::now() - t0 < 1000ms);
  f.g.release();
  blocked.join();
  CHECK(status_of(blocked_reply) == 200);
  CHECK(blocked_reply.find("POST /blocked/abc abc t1 body") != std::string::npos);
}

TEST_CASE("blocking pool: answers keep the requests' order on a connection") {
  fixture f;
  f.g.release();
  std::string reply = f.raw("POST /blocked/first HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na"
                            "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n"
                            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nb");
  size_t first = reply.find("/blocked/first first"), fast = reply.find("\r\n\r\nfast"), echo = reply.find("echo:b");
  REQUIRE(first != std::string::npos);
  REQUIRE(fast != std::string::npos);
  REQUIRE(echo != std::string::npos);
  CHECK(first < fast);
  CHECK(fast < echo);
}

TEST_CASE("blocking pool: a throw is a 500 JSON body; deferred and streaming answers pass through") {
  fixture f;
  std::string thrown = f.raw("GET /throws HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(status_of(thrown) == 500);
  CHECK(thrown.find("\"internal error\"") != std::string::npos);
  std::string deferred = f.raw("GET /deferred HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(status_of(deferred) == 202);
  CHECK(deferred.find("deferred-ok") != std::string::npos);
  std::string stream = f.raw("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(status_of(stream) == 200);
  CHECK(stream.find("data: one") != std::string::npos);
  CHECK(stream.find("data: two") != std::string::npos);
}

TEST_CASE("blocking pool: an upload is readable by a pool handler and removed after its answer") {
  fixture f;
  std::string reply =
      f.raw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nConnection: close\r\n\r\nline1\nline2");
  CHECK(status_of(reply) == 200);
  CHECK(reply.find("upload:line1\nline2") != std::string::npos);
  REQUIRE_FALSE(f.seen_upload.empty());
  // The file goes once the answer is made (on the io thread, just before it is written).
  for (int i = 0; i < 100 && std::filesystem::exists(f.seen_upload); ++i) std::this_thread::sleep_for(10ms);
  CHECK_FALSE(std::filesystem::exists(f.seen_upload));
}

TEST_CASE("blocking pool: once stopped, a pool route answers 503; io routes still answer") {
  fixture f;
  f.pool.stop();
  std::string reply = f.raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx");
  CHECK(status_of(reply) == 503);
  CHECK(reply.find("shutting down") != std::string::npos);
  CHECK(status_of(f.raw("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200);
}

TEST_CASE("blocking pool: its load counts running and waiting handlers") {
  http::router routes;
  http::blocking_pool pool(1);  // one thread: a second request waits for it
  gate g;
  routes.add("GET", "/park", [&](http::request&) {
    g.wait();
    return http::response{};
  });
  routes.set_pool(&pool);
  http::server_options o;
  o.port = 0;
  o.n_threads = 1;
  http::server srv(o, [&](http::request& req) { return routes.dispatch(req); });
  std::string err;
  REQUIRE_MESSAGE(srv.start(&err), err);
  auto load = pool.load();
  CHECK(load->n_threads == 1);
  CHECK(load->n_busy == 0);
  std::vector<std::thread> clients;
  std::atomic<int> n_ok{0};
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&] {
      test::raw_socket s(srv.port());
      s.send("GET /park HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      if (status_of(s.read_until_close(5000ms).bytes) == 200) ++n_ok;
    });
  REQUIRE(g.wait_until_waiting(3000ms));
  for (int i = 0; i < 300 && load->n_queued < 1; ++i) std::this_thread::sleep_for(10ms);
  CHECK(load->n_busy == 1);
  CHECK(load->n_queued == 1);
  g.release();
  for (auto& c : clients) c.join();
  CHECK(n_ok == 2);
  // NOTE: a handler counts as busy until its reply is handed over, a moment after the client has it.
  for (int i = 0; i < 300 && load->n_busy > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(load->n_busy == 0);
  CHECK(load->n_queued == 0);
  srv.stop();
  pool.stop();
}
