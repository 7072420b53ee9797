// The socket-free HTTP request path (http/request_parse.h) that server.cpp and the fuzz
// target share: accepted shapes, each smuggling / malformed shape and its status, and
// replays of inputs the fuzzers found (tests/fuzz/fuzz_svc_http.cpp).
#include <doctest/doctest.h>

#include "http/request_parse.h"

using namespace agentq;

namespace {

http::server_options small_limits() {
  http::server_options o;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 1024;
  return o;
}

// The status the server would answer with (0 = incomplete, 200 = reaches the handler).
int outcome(std::string_view bytes) {
  auto out = http::parse_request(bytes, small_limits());
  if (out.why) return http::status_of(out.why->kind);
  return out.req ? 200 : 0;
}

}  // namespace

TEST_CASE("well-formed requests reach the handler") {
  auto out = http::parse_request(
      "POST /v1/jobs?limit=2&x=%41 HTTP/1.1\r\nHost: a\r\nX-Key: V\r\n"
      "Content-Length: 5\r\n\r\nhello",
      small_limits());
  REQUIRE(out.req);
  CHECK(out.req->method == "POST");
  CHECK(out.req->path == "/v1/jobs");
  CHECK(out.req->query_param("x") == "A");
  CHECK(out.req->header("x-key") == "V");
  CHECK(out.req->body == "hello");
  out = http::parse_request(
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
      small_limits());
  REQUIRE(out.req);
  CHECK(out.req->body == "abcde");
  CHECK(outcome("GET / HTTP/1.0\r\n\r\n") == 200);
  CHECK(outcome("GET / HTTP/1.1\r\nHost: a\r\n") == 0);                    // head not finished
  CHECK(outcome("POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc") == 0);  // body not finished
}

TEST_CASE("limits: 413 and 431") {
  CHECK(outcome("POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n") == 413);
  CHECK(outcome("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n" + std::string(1025, 'a') +
                "\r\n0\r\n\r\n") == 413);
  CHECK(outcome("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n") == 431);
  CHECK(outcome("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a')) == 431);  // no end of head in sight
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 300; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  CHECK(outcome(many + "\r\n") == 431);  // many small headers add up
}

TEST_CASE("request-smuggling shapes are refused") {
  for (const char* bytes : {
           "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi",   // duplicate CL
           "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!",  // conflicting CL
           "POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\nhi",                     // CL list
           "POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\nhi",
           "POST / HTTP/1.1\r\nContent-Length: 0x2\r\n\r\nhi",
           "POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  // TE in HTTP/1.0
           "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",          // obs-fold (SP)
           "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n\tb\r\n\r\n",         // obs-fold (HT)
           "POST / HTTP/1.1\r\nContent-Length: 2\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\nhi",
           "POST / HTTP/1.1\r\nContent-Length : 2\r\n\r\nhi",  // space before colon
           "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
           "GET / HTTP/1.1\nHost: a\n\n",  // bare LF
           "GET / HTTP/2.0\r\n\r\n",
       }) {
    int status = outcome(bytes);
    CHECK_MESSAGE((status >= 400 && status < 600), bytes);
  }
  static const char k_nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
  CHECK(outcome(std::string(k_nul, sizeof k_nul - 1)) == 400);  // NUL in a value
  CHECK(outcome("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n") == 501);
  CHECK(outcome("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n") >= 400);
}

TEST_CASE("bad chunking is refused") {
  for (const char* chunks : {"zz\r\nhi\r\n0\r\n\r\n", "-1\r\nhi\r\n0\r\n\r\n", "fffffffffffffffffff\r\nhi\r\n0\r\n\r\n",
                             "2\r\nhiX\r\n0\r\n\r\n", "2 \r\nhi\r\n0\r\n\r\n", "\r\nhi\r\n0\r\n\r\n",
                             "2;\x01\r\nhi\r\n0\r\n\r\n", "0x2\r\nhi\r\n0\r\n\r\n"}) {
    int status = outcome(std::string("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") + chunks);
    CHECK_MESSAGE((status >= 400 && status < 500), chunks);
  }
}

// The head arriving in small reads, as the server feeds put_head: the status of the outcome
// (0 = still reading, 200 = head accepted).
int head_in_pieces(const std::string& bytes, size_t piece) {
  http::request_parser parser;
  auto o = small_limits();
  http::init_parser(parser, o);
  std::string buffered;
  size_t n_head_bytes = 0;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    buffered += bytes.substr(at, piece);
    auto step = http::put_head(parser, buffered, o, 8192, &n_head_bytes);
    buffered.erase(0, step.n_used);
    if (step.st == http::head_step::status::rejected) return http::status_of(step.why.kind);
    if (step.st == http::head_step::status::done) return 200;
  }
  return 0;
}

TEST_CASE("a head in small reads: total size and obs-fold still enforced") {
  // Beast consumes whole fields as they come, so its own header_limit alone let an endless
  // head through when it arrived in pieces (found writing tests/e2e/http_hostile.cpp).
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 300; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  many += "\r\n";
  for (size_t piece : {1, 7, 100, 1000}) {
    CHECK(head_in_pieces(many, piece) == 431);
    CHECK(head_in_pieces("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\nX-B: c\r\n\r\n", piece) == 400);
    CHECK(head_in_pieces("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\nX-B: c\r\n\r\n", piece) == 200);
  }
}
