// Outbound HTTP/1.1 client (Beast + OpenSSL) for webhooks and server-side tool
// calls. Every URL goes through the ssrf_guard and the connection is made to the
// validated resolved address; redirects are returned, never followed.
// NOTE: Beast stays in http_client.cpp; this header is cheap to include.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "net/ssrf_guard.h"

namespace agentq::net {

struct http_request {
  std::string method = "POST";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // Host/Content-Length are set by the client
  std::string body;
  std::chrono::milliseconds timeout{10000};  // whole exchange: resolve + connect + TLS + write + read
  size_t max_response_bytes = 1 << 20;       // body bytes; larger -> response_too_large
};

struct http_response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // First header with this name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

enum class http_error { none, invalid_url, blocked_address, connect_failed, tls_failed, timeout, response_too_large,
                        protocol_error };
const char* to_string(http_error e);

struct http_result {
  http_error error = http_error::none;
  std::string message;       // what went wrong, for logs and attempt records
  http_response response;    // valid when error == none (any status, 3xx included)
  double elapsed_ms = 0;
  bool ok() const { return error == http_error::none; }
};

class http_client {
 public:
  struct options {
    bool verify_tls = true;  // verify server certificates against the system store
  };
  explicit http_client(ssrf_guard guard) : guard_(std::move(guard)) {}
  http_client(ssrf_guard guard, options opts) : guard_(std::move(guard)), options_(opts) {}

  // Send one request and wait for the response; thread-safe (each call runs its own io_context).
  http_result send(const http_request& request) const;

  const ssrf_guard& guard() const { return guard_; }

 private:
  ssrf_guard guard_;
  options options_;
};

}  // namespace agentq::net
