// The control plane's side of the remote-worker protocol (#28; worker/protocol.h): POST
// /v1/worker/messages, authenticated with the worker token (never a tenant key), applies each
// message with the job store's fenced calls in the order sent, and replies ok | fenced | not_found
// | invalid | error per message. Write messages are recorded in applied_messages by msg_id, so a
// retried one gets its first reply instead of being applied again.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "api/worker_tokens.h"
#include "http/message.h"
#include "http/router.h"

namespace agentq::store {
class store;
class sqlite_db;
struct job_row;
}  // namespace agentq::store
namespace agentq::obs {
class obs_store;
}
namespace agentq::auth {
class key_store;
}

namespace agentq::api {

struct worker_protocol_options {
  std::string token;                   // the fleet-wide worker token (Authorization: Bearer); "" = none
  std::string tokens_file;             // per-worker tokens ("worker_id token" lines: worker_tokens.h); "" = none
  int version = 3;                     // this control plane's message protocol; accepts version-1..version+1
  int64_t applied_retention_ms = 24 * 3600 * 1000;  // applied_messages rows kept this long
  int32_t max_messages = 1024;         // per request
};

class worker_protocol {
 public:
  // db_path: the job store's file (applied_messages lives there). nullptr with *error on failure.
  static std::unique_ptr<worker_protocol> open(worker_protocol_options options, store::store& store,
                                               obs::obs_store* obs, auth::key_store& keys, const std::string& db_path,
                                               std::string* error);
  ~worker_protocol();

  // The route's handler: 401 without a worker token, 403 when a message's worker_id is not the
  // token's (a per-worker token acts for its own id only), 400 for a malformed batch, else 200
  // with {"replies": [...]} (one per message, same order).
  http::response handle(const http::request& req);
  // Re-reads the tokens file (SIGHUP); false + *error when it is unreadable or malformed.
  bool reload_tokens(std::string* error) { return tokens_.reload(error); }
  // One message -> its reply (also for tests).
  nlohmann::json apply(const nlohmann::json& msg);

 private:
  worker_protocol(worker_protocol_options options, store::store& store, obs::obs_store* obs, auth::key_store& keys,
                  std::unique_ptr<store::sqlite_db> db);
  nlohmann::json apply_kind(const std::string& kind, const nlohmann::json& m);
  // Whether worker_id (or, for its model workers, its process id) holds the job's current lease:
  // running, leased to it, at epoch (-1 = whatever the current epoch is: protocol 2's reads).
  static bool holds_lease(const store::job_row& row, const std::string& worker_id, int64_t epoch);
  bool holds_lease(const std::string& job_id, const std::string& worker_id, int64_t epoch);
  std::optional<nlohmann::json> recorded(const std::string& msg_id);
  void record(const std::string& msg_id, const std::string& job_id, const nlohmann::json& reply);

  worker_protocol_options options_;
  worker_tokens tokens_;
  store::store& store_;
  obs::obs_store* obs_;
  auth::key_store& keys_;
  std::mutex mu_;  // NOTE: one connection for applied_messages, one user at a time
  std::unique_ptr<store::sqlite_db> db_;
  int64_t next_prune_ms_ = 0;
  int64_t next_sample_prune_ms_ = 0;
};

void install_worker_protocol_routes(http::router& r, worker_protocol& wp);

}  // namespace agentq::api
