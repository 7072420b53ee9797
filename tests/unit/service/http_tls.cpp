// HTTPS on agentq's own listener (#28: --tls-cert/--tls-key): a self-signed certificate made by
// the openssl CLI for this test; real TLS over loopback from curl and from net::http_client
// (verifying against that certificate); plain HTTP on the TLS port is cut; bad key pairs refused.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "http_test_server.h"
#include "net/http_client.h"
#include "raw_socket.h"
#include "temp_dir.h"
#include "test_env.h"

using namespace agentq;

namespace {

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

// cert.pem + key.pem for 127.0.0.1 / localhost, valid one day.
void make_cert(const test::temp_dir& dir, const std::string& stem) {
  int rc = 0;
  std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
                    "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " + dir.file(stem + "key.pem") +
                    " -out " + dir.file(stem + "cert.pem") + " 2>&1";
  std::string out = run(cmd, &rc);
  if (rc != 0) test::skip("the openssl CLI could not make a test certificate: " + out);
}

http::server_options tls_options(const test::temp_dir& dir) {
  auto o = test::small_limits();
  o.tls_cert_file = dir.file("cert.pem");
  o.tls_key_file = dir.file("key.pem");
  return o;
}

}  // namespace

TEST_CASE("HTTPS: curl and http_client verify the certificate and are served; plain HTTP is cut") {
  test::temp_dir dir;
  make_cert(dir, "");
  test::http_test_server s(tls_options(dir));
  s.routes.add("GET", "/hello", [](http::request&) {
    http::response res;
    res.content_type = "text/plain";
    res.body = "hello over tls";
    return res;
  });
  const std::string base = "https://127.0.0.1:" + std::to_string(s.port());

  int rc = 0;
  if (run("command -v curl", &rc); rc == 0) {
    std::string body = run("curl -sS --max-time 10 --cacert " + dir.file("cert.pem") + " " + base + "/hello 2>&1", &rc);
    CHECK(rc == 0);
    CHECK(body == "hello over tls");
    // Two requests on one kept-alive TLS connection, and a POST with a body.
    body = run("curl -sS --max-time 10 --cacert " + dir.file("cert.pem") + " " + base + "/hello " + base +
                   "/hello -X GET 2>&1",
               &rc);
    CHECK(body == "hello over tls" "hello over tls");
    body = run("curl -sS --max-time 10 --cacert " + dir.file("cert.pem") + " -d 'x=1' " + base + "/echo 2>&1", &rc);
    CHECK(body == "x=1");
    // Without the certificate as a trust anchor the client refuses the server: it is real TLS.
    run("curl -sS --max-time 10 " + base + "/hello 2>&1", &rc);
    CHECK(rc != 0);
  } else {
    MESSAGE("curl not installed: only http_client checks HTTPS");
  }

  // net::http_client (the worker's and the CLI's client) trusts the test certificate through
  // SSL_CERT_FILE, as an operator's own CA would be installed.
  ::setenv("SSL_CERT_FILE", dir.file("cert.pem").c_str(), 1);
  std::string err;
  net::http_client client(net::ssrf_guard(*net::parse_cidr_list("127.0.0.0/8", &err)));
  net::http_request req;
  req.method = "POST";
  req.url = base + "/echo";
  req.body = "ping";
  auto res = client.send(req);
  REQUIRE_MESSAGE(res.ok(), res.message);
  CHECK(res.response.status == 200);
  CHECK(res.response.body == "ping");
  ::unsetenv("SSL_CERT_FILE");

  // Plain HTTP on the TLS port: no HTTP answer, the connection is closed; the server goes on.
  test::raw_socket plain(s.port());
  REQUIRE(plain.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto got = plain.read_until_close(std::chrono::milliseconds(3000));
  CHECK(got.closed);
  CHECK(got.bytes.rfind("HTTP/", 0) == std::string::npos);
  res = [&] {
    ::setenv("SSL_CERT_FILE", dir.file("cert.pem").c_str(), 1);
    auto r = client.send(req);
    ::unsetenv("SSL_CERT_FILE");
    return r;
  }();
  CHECK(res.ok());
}

TEST_CASE("HTTPS: a key without its certificate, a mismatched pair or a missing file fails start()") {
  test::temp_dir dir;
  make_cert(dir, "");
  make_cert(dir, "other_");
  auto start_with = [](http::server_options o) {
    o.port = 0;
    http::server srv(o, [](http::request&) { return http::response{}; });
    std::string err;
    bool ok = srv.start(&err);
    if (ok) srv.stop();
    return ok ? std::string() : err;
  };
  auto o = tls_options(dir);
  o.tls_key_file.clear();
  CHECK(start_with(o).find("both") != std::string::npos);
  o = tls_options(dir);
  o.tls_key_file = dir.file("other_key.pem");
  CHECK(start_with(o).find("--tls-key") != std::string::npos);  // OpenSSL: key values mismatch
  o = tls_options(dir);
  o.tls_cert_file = dir.file("missing.pem");
  CHECK(start_with(o).find("--tls-cert") != std::string::npos);
  CHECK(start_with(tls_options(dir)).empty());
}
