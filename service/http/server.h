// The HTTP/1.1 server (Boost.Beast, keep-alive, async on io_contexts run by a few
// threads): limits, timeouts, request-smuggling checks, then one handler per request.
// NOTE: Beast stays in server.cpp; this header is cheap to include. One io_context per thread
// (server.cpp says why); a handler may answer later (response::deferred) without blocking it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http/message.h"

namespace agentq::http {

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0 = pick a free port (see port())
  int32_t n_threads = 4;
  size_t max_body_bytes = 4 << 20;                  // larger -> 413
  size_t max_header_bytes = 16 << 10;               // larger -> 431
  std::chrono::milliseconds header_timeout{10000};  // whole request head, incl. keep-alive idle (slowloris)
  std::chrono::milliseconds body_timeout{30000};    // whole body
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds drain_timeout{10000};  // stop(): in-flight requests and streams get this long
  int32_t max_connections = 1024;                  // more -> 503 and close
  int32_t max_streams = 256;                       // concurrent streaming (SSE) responses
  // Uploads (issue 29, POST /v1/files): a request with upload_method and path upload_path is read
  // into a file under upload_dir instead of memory (flat memory however large), up to
  // max_upload_bytes (larger -> 413) within upload_body_timeout; the handler sees
  // request::body_file, which is removed once the handler returns. Empty upload_path = none.
  std::string upload_method = "POST";
  std::string upload_path;
  std::string upload_dir;
  size_t max_upload_bytes = size_t(200) << 20;
  std::chrono::milliseconds upload_body_timeout{30 * 60 * 1000};
  // TLS (HTTPS) on this listener: PEM files of the certificate chain and its private key, both
  // or neither; empty = plain HTTP. start() fails on an unreadable or mismatched pair.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Called for each response the server writes itself before any handler runs (413, 431, 400
  // on a bad head, 408, 503 at the connection limit): method ("" when the head did not parse)
  // and status. Runs on an io thread; must not block.
  std::function<void(const std::string& method, int status)> on_rejected;
};

struct server_stats {
  int64_t n_connections = 0;  // open now
  int64_t n_requests = 0;     // served since start
  int64_t n_rejected = 0;     // limit / protocol rejections
};

class server {
 public:
  using handler_fn = std::function<response(request&)>;
  server(server_options options, handler_fn handler);
  ~server();  // stop()
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Bind and listen; false with *error (e.g. address in use).
  bool start(std::string* error);
  // Stop accepting, close idle connections, let in-flight requests finish writing their
  // responses and streams end (up to drain_timeout), then join the threads.
  void stop();
  uint16_t port() const;
  server_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace agentq::http
