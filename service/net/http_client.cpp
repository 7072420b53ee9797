// Outbound HTTP client: SSRF check, connect to the checked addresses, one
// request/response with a deadline and a body limit (see http_client.h).
#include "net/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>

#include <strings.h>

#include <memory>

namespace agentq::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

std::string http_response::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return "";
}

const char* to_string(http_error e) {
  switch (e) {
    case http_error::none: return "none";
    case http_error::invalid_url: return "invalid_url";
    case http_error::blocked_address: return "blocked_address";
    case http_error::connect_failed: return "connect_failed";
    case http_error::tls_failed: return "tls_failed";
    case http_error::timeout: return "timeout";
    case http_error::response_too_large: return "response_too_large";
    case http_error::protocol_error: return "protocol_error";
  }
  return "?";
}

namespace {

std::vector<tcp::endpoint> to_endpoints(const checked_url& u) {
  std::vector<tcp::endpoint> eps;
  for (const ip_address& a : u.addresses) {
    asio::ip::address addr;
    if (a.is_v6) {
      asio::ip::address_v6::bytes_type b;
      std::copy(a.bytes.begin(), a.bytes.end(), b.begin());
      addr = asio::ip::address_v6(b);
    } else {
      addr = asio::ip::address_v4({a.bytes[0], a.bytes[1], a.bytes[2], a.bytes[3]});
    }
    eps.emplace_back(addr, u.url.port);
  }
  return eps;
}

bhttp::request<bhttp::string_body> make_request(const http_request& r, const parsed_url& u) {
  bhttp::request<bhttp::string_body> req;
  req.method_string(r.method);
  req.target(u.target);
  req.version(11);
  bool default_port = (u.tls() && u.port == 443) || (!u.tls() && u.port == 80);
  std::string host = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  req.set(bhttp::field::host, default_port ? host : host + ":" + std::to_string(u.port));
  req.set(bhttp::field::user_agent, "agentq/0.1");
  req.set(bhttp::field::connection, "close");
  for (const auto& [k, v] : r.headers) req.set(k, v);
  req.body() = r.body;
  req.prepare_payload();
  return req;
}

http_error classify(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return http_error::timeout;
  if (ec == bhttp::error::body_limit || ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
    return http_error::response_too_large;
  return http_error::protocol_error;
}

// Run one exchange on an already-connected stream (plain or TLS).
template <class Stream>
void exchange(Stream& stream, beast::tcp_stream& lowest, asio::io_context& ioc, const http_request& r,
              const parsed_url& u, std::chrono::steady_clock::time_point deadline, http_result& out) {
  auto req = make_request(r, u);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(r.max_response_bytes);
  parser.header_limit(64 * 1024);
  beast::error_code result_ec;
  lowest.expires_at(deadline);
  bhttp::async_write(stream, req, [&](beast::error_code ec, size_t) {
    if (ec) {
      result_ec = ec;
      return;
    }
    bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec2, size_t) { result_ec = ec2; });
  });
  ioc.restart();
  ioc.run();
  if (result_ec) {
    out.error = classify(result_ec);
    out.message = "HTTP exchange failed: " + result_ec.message();
    return;
  }
  auto& res = parser.get();
  out.response.status = int(res.result_int());
  for (const auto& f : res) out.response.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  out.response.body = std::move(res.body());
}

}  // namespace

http_result http_client::send(const http_request& request) const {
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + request.timeout;
  http_result out;
  auto finish = [&]() -> http_result {
    out.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::move(out);
  };

  std::string error;
  auto parsed = parse_url(request.url, &error);
  if (!parsed) {
    out.error = http_error::invalid_url;
    out.message = error;
    return finish();
  }
  auto checked = guard_.check(request.url, &error);
  if (!checked) {
    out.error = http_error::blocked_address;
    out.message = error;
    return finish();
  }

  asio::io_context ioc;
  beast::tcp_stream tcp_stream(ioc);
  auto endpoints = to_endpoints(*checked);
  beast::error_code connect_ec;
  tcp_stream.expires_at(deadline);
  tcp_stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) { connect_ec = ec; });
  ioc.run();
  if (connect_ec) {
    out.error = connect_ec == beast::error::timeout ? http_error::timeout : http_error::connect_failed;
    out.message = "connect to " + checked->url.host + ":" + std::to_string(checked->url.port) +
                  " failed: " + connect_ec.message();
    return finish();
  }

  if (!checked->url.tls()) {
    exchange(tcp_stream, tcp_stream, ioc, request, checked->url, deadline, out);
    return finish();
  }

  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  if (options_.verify_tls) {
    ctx.set_default_verify_paths();
    ctx.set_verify_mode(asio::ssl::verify_peer);
  } else {
    ctx.set_verify_mode(asio::ssl::verify_none);
  }
  beast::ssl_stream<beast::tcp_stream&> tls(tcp_stream, ctx);
  if (!checked->url.host_is_literal) SSL_set_tlsext_host_name(tls.native_handle(), checked->url.host.c_str());
  if (options_.verify_tls) tls.set_verify_callback(asio::ssl::host_name_verification(checked->url.host));
  beast::error_code hs_ec;
  tcp_stream.expires_at(deadline);
  tls.async_handshake(asio::ssl::stream_base::client, [&](beast::error_code ec) { hs_ec = ec; });
  ioc.restart();
  ioc.run();
  if (hs_ec) {
    out.error = hs_ec == beast::error::timeout ? http_error::timeout : http_error::tls_failed;
    out.message = "TLS handshake with " + checked->url.host + " failed: " + hs_ec.message();
    return finish();
  }
  exchange(tls, tcp_stream, ioc, request, checked->url, deadline, out);
  return finish();
}

}  // namespace agentq::net
