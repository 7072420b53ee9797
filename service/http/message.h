// Plain request/response types shared by the HTTP server, the router and the API
// handlers. NOTE: no Beast here, so API code compiles without it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentq::http {

using header_list = std::vector<std::pair<std::string, std::string>>;

struct request {
  std::string method;             // "GET", "POST", ...
  std::string target;             // as received: path + query
  std::string path;               // raw path, without the query
  std::string query;              // after '?', raw
  header_list headers;            // names lowercased
  std::string body;
  std::string body_file;          // an upload (server_options::upload_path): the body is in this file
  std::string remote;             // peer address
  std::vector<std::pair<std::string, std::string>> path_params;  // filled by the router

  // First header with this (lowercase) name, or "".
  std::string header(std::string_view name) const;
  // The same without a copy: valid while the request lives and its headers are not changed.
  std::string_view header_view(std::string_view name) const;
  // Percent-decoded query parameter; nullopt when absent.
  std::optional<std::string> query_param(std::string_view name) const;
  // Every query parameter, decoded, in order.
  std::vector<std::pair<std::string, std::string>> query_params() const;
  std::string path_param(std::string_view name) const;
};

// A live response body (SSE): write() blocks until the bytes are sent or the peer is gone.
class stream_sink {
 public:
  virtual ~stream_sink() = default;
  // false once the connection is closed or a write timed out; the producer should return.
  virtual bool write(std::string_view data) = 0;
  virtual bool closed() const = 0;
};

struct response;
// Finishes a deferred response (response::deferred): call it once, from any thread, with a function
// that makes the response; that function runs on the connection's io thread (so building the body
// costs the caller's thread nothing). A second call is ignored.
using reply_fn = std::function<void(std::function<response()> make)>;

struct response {
  int status = 200;
  std::string content_type = "application/json";
  header_list headers;
  std::string body;
  // Non-empty: the head goes out without a length, then stream runs on its own thread
  // writing the body; the connection closes when it returns.
  std::function<void(stream_sink&)> stream;
  // Set: the answer is not ready yet (e.g. it waits on a database commit). The server calls it at
  // once with a reply_fn and goes on serving other connections; the io thread never blocks on it.
  // NOTE: must not throw; status/body above are ignored. The connection reads no further request
  // until the reply arrives (HTTP/1.1 answers in order).
  std::function<void(reply_fn reply)> deferred;
};

std::string percent_decode(std::string_view s);

}  // namespace agentq::http
