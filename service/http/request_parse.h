// The request path of the HTTP server without the sockets: Beast parser setup, the
// head checks (limits, request-smuggling shapes, obs-fold) and the conversion to
// http::request. server.cpp drives these over a socket; the fuzz target
// (tests/fuzz/fuzz_svc_http.cpp) and unit tests drive them over a byte string.
// NOTE: includes Beast; include it only where Beast is already needed.
#pragma once

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "http/errors.h"
#include "http/server.h"

namespace agentq::http {

using request_parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Why a request is refused before it reaches a handler: the error response to send
// (then the connection closes).
struct rejection {
  error_kind kind = error_kind::invalid_request;
  std::string message;
};

// A fresh parser with the server's header and body limits.
void init_parser(request_parser& parser, const server_options& options);

struct head_step {
  enum class status { need_more, done, rejected } st = status::need_more;
  size_t n_used = 0;  // bytes of `buffered` the parser consumed (drop them from the buffer)
  rejection why;      // when rejected
};

// Feed the bytes buffered so far to a parser still reading the request head.
// need_more: read more (nothing consumed); done: the head is parsed and passed every
// check (the parser may still want a body); rejected: answer `why` and close.
// `max_buffer` is the most bytes the caller can buffer; a head that needs more is a 431.
// *n_head_bytes counts the head bytes consumed by earlier calls for this request (start at 0).
// NOTE: Beast consumes complete header fields as they arrive and its header_limit only bounds
// the unconsumed rest, so the total head size is enforced here.
head_step put_head(request_parser& parser, std::string_view buffered, const server_options& options, size_t max_buffer,
                   size_t* n_head_bytes);

// The rejection for an error while reading the body; nullopt = close without an answer
// (the peer went away or the body timed out).
std::optional<rejection> body_read_rejection(boost::beast::error_code ec, const server_options& options);

// The parsed request as handlers see it (header names lowercased); moves the body out.
request to_request(request_parser& parser);
// The same from a request head only (an upload's body went to a file).
request to_request_head(const boost::beast::http::request_header<>& head);

// Whether a parsed head is an upload (server_options::upload_path): its body goes to a file.
bool is_upload(const request_parser& parser, const server_options& options);

// The whole path over one byte string (fuzzing, tests): the request, or the rejection
// the server would send; nullopt when the bytes end before the request does.
struct parse_outcome {
  std::optional<request> req;
  std::optional<rejection> why;
};
parse_outcome parse_request(std::string_view bytes, const server_options& options);

}  // namespace agentq::http
