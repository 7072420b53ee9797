// The OpenAI surface's own records on the job store's SQLite file (own connection, like the key
// store): responses deleted by older versions and OpenAI-shaped webhook endpoints
// (POST/GET/DELETE /v1/webhook_endpoints) that the webhook dispatcher fans response events out to.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace agentq::store {
class sqlite_db;
}

namespace agentq::api {

struct webhook_endpoint {
  std::string id;                    // "we_<token>"
  std::string tenant;
  std::string url;
  std::vector<std::string> events;   // response.completed, response.failed, response.cancelled, response.incomplete
  int64_t created_ms = 0;
};

// Event types an endpoint may subscribe to.
bool is_response_webhook_event(const std::string& name);

class openai_registry {
 public:
  // Open db_path (the job store's file, migrated by the store: 0007_openai). nullptr with *error.
  static std::unique_ptr<openai_registry> open(const std::string& db_path, std::string* error);
  ~openai_registry();

  // A response deleted by an agentq before DELETE /v1/responses/{id} became a job deletion
  // (store::delete_job): it stays 404 (nothing adds rows any more).
  bool is_deleted(const std::string& job_id);

  std::optional<webhook_endpoint> add_endpoint(const std::string& tenant, const std::string& url,
                                               std::vector<std::string> events);
  // tenant empty = every tenant's (the dispatcher).
  std::vector<webhook_endpoint> list_endpoints(const std::string& tenant);
  std::optional<webhook_endpoint> get_endpoint(const std::string& id, const std::string& tenant);
  bool remove_endpoint(const std::string& id, const std::string& tenant);  // false if none

 private:
  explicit openai_registry(std::unique_ptr<store::sqlite_db> db);
  std::mutex mu_;
  std::unique_ptr<store::sqlite_db> db_;
};

}  // namespace agentq::api
