// SSRF guard corpus: schemes, odd IPv4 host forms, special ranges, IPv6 forms, allow-list,
// userinfo / trailing-dot tricks, and the connect-time check of names that resolve to loopback.
#include <doctest/doctest.h>

#include "http/router.h"
#include "http/server.h"
#include "loopback_name.h"
#include "net/http_client.h"
#include "net/ssrf_guard.h"

using namespace agentq::net;

namespace {
bool blocked(const ssrf_guard& g, const char* url) {
  std::string err;
  bool bad = !g.check(url, &err, /*resolve=*/false);
  return bad;
}
}  // namespace

TEST_CASE("schemes and syntax") {
  ssrf_guard g;
  for (const char* u : {"ftp://example.com/", "file:///etc/passwd", "gopher://example.com", "example.com",
                        "http://", "http://user:pw@example.com/", "http://example.com:0/", "http://example.com:99999/",
                        "http://exa mple.com/", "http://example.com:/", "javascript:alert(1)", "http://[::1/",
                        "http://ex_ample.com/", "http://example.com\\@evil.com/", "dict://x:11211/"})
    CHECK_MESSAGE(blocked(g, u), u);
  auto u = parse_url("HTTPS://Example.COM:8443/hook?x=1#frag", nullptr);
  REQUIRE(u);
  CHECK(u->scheme == "https");
  CHECK(u->host == "example.com");
  CHECK(u->port == 8443);
  CHECK(u->target == "/hook?x=1");
  CHECK(parse_url("http://example.com", nullptr)->target == "/");
  CHECK(parse_url("http://example.com", nullptr)->port == 80);
}

TEST_CASE("private, loopback and special IPv4") {
  ssrf_guard g;
  for (const char* u : {"http://127.0.0.1/", "http://127.1.2.3:8080/", "http://10.1.2.3/", "http://172.16.0.1/",
                        "http://172.31.255.255/", "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data",
                        "http://169.254.1.1/", "http://100.64.0.1/", "http://100.127.255.255/", "http://0.0.0.0/",
                        "http://224.0.0.1/", "http://239.255.255.250/", "http://255.255.255.255/",
                        "http://240.0.0.1/", "http://198.18.0.1/", "http://192.0.2.1/", "http://localhost/",
                        "http://foo.localhost:80/"})
    CHECK_MESSAGE(blocked(g, u), u);
  CHECK_FALSE(blocked(g, "http://8.8.8.8/"));
  CHECK_FALSE(blocked(g, "http://100.128.0.1/"));
  CHECK_FALSE(blocked(g, "http://172.32.0.1/"));
}

TEST_CASE("decimal, hex, octal and short IPv4 forms") {
  ssrf_guard g;
  for (const char* u : {"http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/", "http://0177.0.0.1/",
                        "http://017700000001/", "http://127.1/", "http://127.0.1/", "http://0/",
                        "http://3232235521/", "http://0xa9fea9fe/", "http://8.8.8.08/", "http://1.2.3.4.5/",
                        "http://256.1.1.1/", "http://0x08.0x08.0x08.0x08/", "http://134744072/"})
    CHECK_MESSAGE(blocked(g, u), u);
}

TEST_CASE("IPv6 forms") {
  ssrf_guard g;
  for (const char* u : {"http://[::1]/", "http://[::]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
                        "http://[::ffff:8.8.8.8]/", "http://[::127.0.0.1]/", "http://[fe80::1]/",
                        "http://[fe80::1%25eth0]/", "http://[fc00::1]/", "http://[fd00:ec2::254]/",
                        "http://[ff02::1]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::]/",
                        "http://[2001:db8::1]/", "http://[0:0:0:0:0:ffff:169.254.169.254]/"})
    CHECK_MESSAGE(blocked(g, u), u);
  CHECK_FALSE(blocked(g, "http://[2606:4700:4700::1111]/"));
}

TEST_CASE("allow-list") {
  std::string err;
  auto allow = parse_cidr_list("127.0.0.0/8, 10.0.0.0/8", &err);
  REQUIRE(allow);
  ssrf_guard g(*allow);
  CHECK_FALSE(blocked(g, "http://127.0.0.1:9000/hook"));
  CHECK_FALSE(blocked(g, "http://localhost:9000/hook"));
  CHECK_FALSE(blocked(g, "http://10.9.9.9/"));
  CHECK(blocked(g, "http://192.168.0.1/"));
  CHECK(blocked(g, "http://[::1]/"));
  CHECK(blocked(g, "http://2130706433/"));  // odd forms stay rejected even when the address is allowed
  ssrf_guard all(*parse_cidr_list("0.0.0.0/0", &err));
  CHECK(blocked(all, "http://169.254.169.254/"));  // metadata is never allowed
  CHECK_FALSE(parse_cidr_list("10.0.0.0/33", &err));
  CHECK_FALSE(parse_cidr_list("bogus", &err));
}

TEST_CASE("cidr contains") {
  auto c = cidr::parse("100.64.0.0/10");
  REQUIRE(c);
  CHECK(c->contains(*ip_address::parse("100.127.1.1")));
  CHECK_FALSE(c->contains(*ip_address::parse("100.128.0.0")));
  CHECK(cidr::parse("::/0")->contains(*ip_address::parse("2001::1")));
  CHECK_FALSE(ip_address::parse("01.2.3.4"));
  CHECK(ip_address::parse("1.2.3.4")->to_string() == "1.2.3.4");
}

TEST_CASE("resolution of a hostname that maps to loopback is blocked") {
  ssrf_guard g;
  std::string err;
  CHECK_FALSE(g.check("http://localhost:1/", &err));
  CHECK(err.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("trailing dots, userinfo and parser-confusion tricks") {
  ssrf_guard g;
  for (const char* u : {"http://127.0.0.1./", "http://169.254.169.254./", "http://localhost./", "http://LocalHost/",
                        "http://a.b.localhost./", "http://0x7f.1./", "http://2130706433./", "http://127.0.0.1../",
                        "http://good@127.0.0.1/", "http://good.example.com@127.0.0.1/", "http://:@127.0.0.1/",
                        "http://@127.0.0.1/", "http://user:pw@169.254.169.254/", "http://127.0.0.1%2f@good.com/",
                        "http://127.0.0.1#@good.com/", "http://127.0.0.1?@good.com/", "http://127.0.0.1/@good.com/",
                        "http://good.com\\@127.0.0.1/", "http://127.0.0.1:80:80/", "http://[::1]:80@good.com/",
                        "http://127.0.0.1%00.good.com/", "http://%31%32%37.0.0.1/", "http://127。0。0。1/",
                        "HTTP://127.0.0.1/", "hTtPs://[::1]/", "http:/127.0.0.1/", "http:\\\\127.0.0.1/",
                        "//127.0.0.1/", "127.0.0.1:80"})
    CHECK_MESSAGE(blocked(g, u), u);
  // what is left after a '#', '?' or '/' is path, not host: still loopback
  auto u = parse_url("http://127.0.0.1#@good.com/", nullptr);
  REQUIRE(u);
  CHECK(u->host == "127.0.0.1");
}

TEST_CASE("more schemes, CGNAT edges, IPv4-mapped and translated IPv6") {
  ssrf_guard g;
  for (const char* u : {"file://localhost/etc/passwd", "gopher://127.0.0.1:6379/_INFO", "ftp://8.8.8.8/",
                        "ldap://8.8.8.8/", "ws://8.8.8.8/", "data:text/plain,hi", "jar:http://8.8.8.8!/",
                        "http+unix://x/", "netdoc:///etc/passwd", "tftp://8.8.8.8/"})
    CHECK_MESSAGE(blocked(g, u), u);
  for (const char* u : {"http://100.64.0.0/", "http://100.100.100.200/", "http://100.127.255.255/",
                        "http://[::ffff:100.64.0.1]/", "http://[::ffff:a9fe:a9fe]/", "http://[::ffff:0.0.0.0]/",
                        "http://[::ffff:10.0.0.1]/", "http://[::ffff:8.8.8.8]/", "http://[64:ff9b::10.0.0.1]/",
                        "http://[64:ff9b::8.8.8.8]/", "http://[fd00:ec2::254]/", "http://[FD00:EC2:0:0:0:0:0:254]/",
                        "http://[::1%25lo]/", "http://[fe80::a9fe:a9fe]/", "http://[::0:1]/", "http://[0::1]/"})
    CHECK_MESSAGE(blocked(g, u), u);
  CHECK_FALSE(blocked(g, "http://100.63.255.255/"));
  CHECK_FALSE(blocked(g, "http://100.128.0.0/"));
  // metadata stays blocked in every spelling, even with everything allowed
  std::string err;
  ssrf_guard all(*parse_cidr_list("0.0.0.0/0,::/0", &err));
  for (const char* u : {"http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://169.254.169.254./"})
    CHECK_MESSAGE(blocked(all, u), u);
}

// DNS-rebinding shape: a host *name* (not a literal) that resolves to loopback passes the
// syntax-only check but is refused once resolved, and http_client refuses to connect to it.
TEST_CASE("a host name resolving to loopback is refused at resolve and connect time") {
  std::string host = agentq::test::loopback_hostname();
  if (host.empty()) {
    MESSAGE("this machine's host name does not resolve to loopback; using localhost only");
    host = "localhost";
  }
  agentq::http::router r;
  r.add("POST", "/hook", [](agentq::http::request&) { return agentq::http::response{}; });
  agentq::http::server_options o;
  o.port = 0;
  o.n_threads = 1;
  agentq::http::server srv(o, [&](agentq::http::request& req) { return r.dispatch(req); });
  std::string err;
  REQUIRE(srv.start(&err));
  std::string url = "http://" + host + ":" + std::to_string(srv.port()) + "/hook";
  INFO(url);

  ssrf_guard strict;
  if (host != "localhost") CHECK(strict.check(url, &err, /*resolve=*/false));  // syntax alone cannot tell
  CHECK_FALSE(strict.check(url, &err));
  CHECK(err.find("127.") != std::string::npos);
  http_client client{strict};
  http_request req;
  req.url = url;
  req.body = "{}";
  auto res = client.send(req);
  CHECK(res.error == http_error::blocked_address);

  // with loopback on the allow-list the same request goes through: the refusal above was the guard
  http_client allowed{ssrf_guard(*parse_cidr_list("127.0.0.0/8", &err))};
  res = allowed.send(req);
  CHECK_MESSAGE(res.ok(), res.message);
  srv.stop();
}
