// Webhook delivery: tails the job store's "status" events into a durable outbox
// (webhook_deliveries, one row per event, webhook-id fixed for life), then sends due
// deliveries signed with Standard Webhooks headers, retrying on a backoff schedule with
// jitter. Only 2xx succeeds; redirects are not followed; 410 disables the endpoint.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"

namespace agentq::store {
class store;
class sqlite_db;
}  // namespace agentq::store

namespace agentq::webhooks {

struct dispatcher_options {
  // Delay before retry n (after attempt n failed); attempts = schedule.size() + 1.
  // Default after Standard Webhooks: 5s, 5m, 30m, 2h, 5h, 10h, 10h.
  std::vector<std::chrono::milliseconds> schedule = {
      std::chrono::seconds(5),  std::chrono::minutes(5), std::chrono::minutes(30), std::chrono::hours(2),
      std::chrono::hours(5),    std::chrono::hours(10),  std::chrono::hours(10)};
  double jitter = 0.2;                                // +-fraction of each delay
  std::chrono::milliseconds timeout{10000};           // per attempt
  size_t max_response_bytes = 64 << 10;
  int32_t n_senders = 4;                              // concurrent deliveries
  std::chrono::milliseconds poll{200};                // idle poll of events and due deliveries
};

struct attempt_record {
  int32_t attempt_idx = 0;
  int32_t status_code = 0;   // 0 = no response
  std::string error;
  int64_t duration_ms = 0;
  int64_t created_ms = 0;
};

struct delivery_record {
  std::string id;            // webhook-id
  std::string job_id, event_type, url, state;  // state: pending|succeeded|failed|disabled
  int32_t n_attempts = 0;
  int64_t next_attempt_ms = 0, created_ms = 0;
  std::vector<attempt_record> attempts;
};

// The signing secret for a job's deliveries: the job's own webhook.secret, else its key's.
using secret_fn = std::function<std::string(const std::string& job_id, const std::string& tenant)>;

class dispatcher {
 public:
  // db_path: the job store's SQLite file (own connection). nullptr with *error on failure.
  static std::unique_ptr<dispatcher> open(dispatcher_options options, store::store& store,
                                          const std::string& db_path, net::http_client client, secret_fn secrets,
                                          std::string* error);
  ~dispatcher();

  void start();  // scanner + sender threads
  void stop();   // finish in-flight attempts, join

  // One pass each (tests; the threads' bodies). Return the number of rows handled.
  int32_t scan_once();
  int32_t send_once();

  std::vector<delivery_record> list(const std::string& job_id);

 private:
  struct impl;
  explicit dispatcher(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace agentq::webhooks
