// A synchronous hiredis 0.14 client: argv commands, replies copied into plain values.
// A context that saw an I/O error is dropped; the next command reconnects with backoff.
// One client per thread (not thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct redisContext;

namespace agentq::queue {

struct redis_options {
  std::string host = "127.0.0.1";
  int32_t port = 6379;
  // AUTH after each connect: "AUTH password" (requirepass) or "AUTH username password" (an ACL
  // user; Redis >= 6); empty password = no AUTH. SELECT db when db != 0.
  std::string username;
  std::string password;
  int32_t db = 0;
  // Redis Sentinel (sentinel:// URLs): when set, each connect asks these sentinels (in turn) for
  // master_name's address, connects there and checks ROLE is master; a reply of READONLY,
  // UNBLOCKED (demoted while blocked), MASTERDOWN or LOADING drops the connection, so the next
  // command resolves again. host/port then hold the master last resolved.
  std::vector<std::pair<std::string, int32_t>> sentinels;
  std::string master_name;
  int32_t connect_timeout_ms = 1000;
  int32_t io_timeout_ms = 5000;        // NOTE: must exceed the longest BLOCK of a blocking read
  int32_t backoff_initial_ms = 50;     // reconnect backoff, doubling up to backoff_max_ms
  int32_t backoff_max_ms = 2000;
};

struct redis_reply {
  enum class kind { nil, status, error, integer, string, array, io_error };
  kind type = kind::nil;
  std::string str;                     // status / error / string; io_error: the message
  int64_t integer = 0;
  std::vector<redis_reply> elements;   // array

  bool ok() const { return type != kind::error && type != kind::io_error; }
  bool is_nil() const { return type == kind::nil; }
};

struct redis_stats {
  int64_t n_commands = 0, n_errors = 0, n_io_errors = 0, n_reconnects = 0;
};

class redis_client {
 public:
  explicit redis_client(redis_options options);
  ~redis_client();
  redis_client(const redis_client&) = delete;
  redis_client& operator=(const redis_client&) = delete;

  // Run one command. io_error when not connected (backoff pending) or the socket failed.
  redis_reply command(const std::vector<std::string>& argv);
  // Pipeline: send all, read all replies (one io_error fills the rest).
  std::vector<redis_reply> pipeline(const std::vector<std::vector<std::string>>& commands);
  bool connected() const { return ctx_ != nullptr; }
  const redis_stats& stats() const { return stats_; }
  const redis_options& options() const { return options_; }

 private:
  bool ensure_connected();
  // AUTH + SELECT on a fresh context; false with *why (never the password) if Redis refused.
  bool handshake(redisContext* c, std::string* why);
  // Sentinel: the master's address from the first sentinel that knows it (sentinel.cpp).
  bool resolve_master(std::string* host, int32_t* port, std::string* why);
  // Sentinel: the connected server says it is the master (ROLE).
  bool check_master(redisContext* c, std::string* why);
  // An error reply that means "not the master (any more)": drop the connection (sentinel mode).
  void on_error_reply(const std::string& err);
  void drop(const std::string& why);

  redis_options options_;
  redisContext* ctx_ = nullptr;
  redis_stats stats_;
  int64_t next_attempt_ms_ = 0;        // steady clock ms before which we don't reconnect
  int32_t backoff_ms_ = 0;
  std::string last_handshake_error_;   // logged once until it changes or a connect succeeds
  size_t sentinel_idx_ = 0;            // the sentinel asked first (the last that answered)
};

}  // namespace agentq::queue
