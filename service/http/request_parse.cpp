// The socket-free request path of the HTTP server: parser limits, head checks,
// conversion to http::request (see request_parse.h).
#include "http/request_parse.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <cctype>

namespace agentq::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

namespace {

rejection too_large_head(const server_options& o) {
  return {error_kind::header_too_large, "request headers exceed " + std::to_string(o.max_header_bytes) + " bytes"};
}
rejection too_large_body(const server_options& o) {
  return {error_kind::payload_too_large, "request body exceeds " + std::to_string(o.max_body_bytes) + " bytes"};
}

// A header line that starts with SP or HT continues the previous field (obs-fold,
// RFC 9112 5.2). NOTE: Beast would join it with a space; we refuse it, as the RFC
// allows, because proxies disagree on how to read it (a smuggling vector).
bool has_obs_fold(std::string_view head) {
  for (size_t i = head.find("\r\n"); i != std::string_view::npos; i = head.find("\r\n", i + 2))
    if (i + 2 < head.size() && (head[i + 2] == ' ' || head[i + 2] == '\t')) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Checks on a parsed head that Beast accepts but a front proxy might read differently.
std::optional<rejection> check_head(const request_parser& parser) {
  const auto& h = parser.get();
  auto cl = h.equal_range(bhttp::field::content_length);
  auto te = h.equal_range(bhttp::field::transfer_encoding);
  auto n_cl = std::distance(cl.first, cl.second);
  auto n_te = std::distance(te.first, te.second);
  if (n_cl > 1) return rejection{error_kind::invalid_request, "duplicate Content-Length header"};
  if (n_cl == 1 && n_te > 0)
    return rejection{error_kind::invalid_request, "Content-Length together with Transfer-Encoding is not allowed"};
  if (n_cl == 1) {
    // NOTE: Beast accepts a list of equal values ("5, 5"); only plain digits are unambiguous.
    std::string_view v = trim(cl.first->value());
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return rejection{error_kind::invalid_request, "Content-Length must be a single decimal number"};
  }
  if (n_te > 1) return rejection{error_kind::invalid_request, "more than one Transfer-Encoding header"};
  if (n_te == 1) {
    if (h.version() != 11)
      return rejection{error_kind::invalid_request, "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
    if (!iequals(trim(te.first->value()), "chunked"))
      return rejection{error_kind::not_implemented, "only Transfer-Encoding: chunked is supported"};
  }
  if (h.version() != 11 && h.version() != 10) return rejection{error_kind::invalid_request, "unsupported HTTP version"};
  return std::nullopt;
}

}  // namespace

void init_parser(request_parser& parser, const server_options& options) {
  parser.header_limit(uint32_t(std::min<size_t>(options.max_header_bytes, UINT32_MAX)));
  // NOTE: an upload's larger limit must hold until the head is parsed (Beast checks Content-Length
  // against it then); put_head narrows it to max_body_bytes for every other request.
  parser.body_limit(options.upload_path.empty() ? options.max_body_bytes
                                                : std::max(options.max_body_bytes, options.max_upload_bytes));
}

bool is_upload(const request_parser& parser, const server_options& options) {
  if (options.upload_path.empty() || !parser.is_header_done()) return false;
  const auto& h = parser.get();
  if (h.method_string() != options.upload_method) return false;
  std::string_view target = h.target();
  return target.substr(0, target.find('?')) == options.upload_path;
}

head_step put_head(request_parser& parser, std::string_view buffered, const server_options& options, size_t max_buffer,
                   size_t* n_head_bytes) {
  head_step out;
  beast::error_code ec;
  out.n_used = parser.put(asio::buffer(buffered.data(), buffered.size()), ec);
  *n_head_bytes += out.n_used;
  // NOTE: Beast consumes a field only together with its folded continuation lines (it looks one
  // character past each CRLF), so scanning each consumed slice finds every obs-fold.
  std::string_view consumed = buffered.substr(0, out.n_used);
  auto reject = [&](rejection why) {
    out.st = head_step::status::rejected;
    out.why = std::move(why);
    return out;
  };
  if (ec == bhttp::error::need_more) {
    size_t n_pending = buffered.size() - out.n_used;
    if (n_pending >= max_buffer || *n_head_bytes + n_pending > options.max_header_bytes)
      return reject(too_large_head(options));
    if (has_obs_fold(consumed))
      return reject({error_kind::invalid_request, "obsolete line folding (obs-fold) in request headers"});
    return out;
  }
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) return reject(too_large_head(options));
  if (ec == bhttp::error::body_limit) return reject(too_large_body(options));
  if (ec) return reject({error_kind::invalid_request, "malformed HTTP request: " + ec.message()});
  if (*n_head_bytes > options.max_header_bytes) return reject(too_large_head(options));
  if (has_obs_fold(consumed))
    return reject({error_kind::invalid_request, "obsolete line folding (obs-fold) in request headers"});
  if (!parser.is_header_done()) return out;
  if (auto why = check_head(parser)) return reject(std::move(*why));
  if (is_upload(parser, options)) {
    if (parser.content_length() && *parser.content_length() > options.max_upload_bytes)
      return reject({error_kind::payload_too_large,
                     "the upload exceeds " + std::to_string(options.max_upload_bytes) + " bytes (--max-file-bytes)"});
    parser.body_limit(options.max_upload_bytes);
  } else {
    if (parser.content_length() && *parser.content_length() > options.max_body_bytes)
      return reject(too_large_body(options));
    parser.body_limit(options.max_body_bytes);
  }
  out.st = head_step::status::done;
  return out;
}

std::optional<rejection> body_read_rejection(beast::error_code ec, const server_options& options) {
  if (ec == bhttp::error::body_limit) return too_large_body(options);
  if (ec == beast::error::timeout || ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
    return std::nullopt;
  return rejection{error_kind::invalid_request, "malformed HTTP request body: " + ec.message()};
}

request to_request(request_parser& parser) {
  request req = to_request_head(parser.get().base());
  req.body = std::move(parser.get().body());
  return req;
}

request to_request_head(const bhttp::request_header<>& breq) {
  request req;
  req.method = std::string(breq.method_string());
  req.target = std::string(breq.target());
  size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  req.headers.reserve(size_t(std::distance(breq.begin(), breq.end())));  // one allocation, not one per doubling
  for (const auto& f : breq) {
    std::string name(f.name_string());
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    req.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  return req;
}

parse_outcome parse_request(std::string_view bytes, const server_options& options) {
  request_parser parser;
  init_parser(parser, options);
  head_step step;
  size_t n_head_bytes = 0;
  do {  // the server calls put_head again after every read; here all bytes are present at once
    size_t before = bytes.size();
    step = put_head(parser, bytes, options, SIZE_MAX, &n_head_bytes);
    bytes.remove_prefix(step.n_used);
    if (step.st == head_step::status::need_more && bytes.size() == before) return {};
  } while (step.st == head_step::status::need_more);
  if (step.st == head_step::status::rejected) return {std::nullopt, step.why};
  while (!parser.is_done()) {
    beast::error_code ec;
    size_t n = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(n);
    if (ec && ec != bhttp::error::need_more) {
      auto why = body_read_rejection(ec, options);
      if (!why) return {};
      return {std::nullopt, std::move(*why)};
    }
    if (n == 0 && !parser.is_done()) return {};  // the bytes end inside the body
  }
  return {to_request(parser), std::nullopt};
}

}  // namespace agentq::http
