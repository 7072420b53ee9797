// The Batch API's records on the job store's SQLite file (own connection; tables from
// migrations/0008_batch.sql): files, batches, and the bulk acceptance of a batch's lines as jobs
// (one transaction per chunk: jobs + status events + outbox rows + the batch's resume point).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "store/store.h"

namespace agentq::store {

class conn;

struct file_row {
  std::string id;                  // "file-<hex>"
  std::string tenant;
  std::string purpose;             // batch | batch_output
  std::string filename;
  int64_t bytes = 0;
  int64_t n_lines = 0;
  std::string endpoints;           // urls named by the lines, comma-separated
  std::string path;                // relative to the files directory
  int64_t created_ms = 0;
};

enum class batch_status { validating, in_progress, finalizing, completed, expired, cancelling, cancelled, failed };
const char* to_string(batch_status s);
std::optional<batch_status> parse_batch_status(std::string_view s);
bool is_final(batch_status s);     // completed, expired, cancelled, failed

struct batch_row {
  int64_t seq = 0;
  std::string id;                  // "batch_<hex>"
  std::string tenant, key_id, endpoint, input_file_id, completion_window;
  std::string metadata_json = "null";
  batch_status status = batch_status::validating;
  std::string errors_json;         // failed: {"object":"list","data":[{code,message,param,line}]}
  std::string output_file_id, error_file_id;
  int64_t n_total = 0, n_accepted = 0, n_completed = 0, n_failed = 0;
  int64_t created_ms = 0, expires_ms = 0, in_progress_ms = 0, finalizing_ms = 0, completed_ms = 0, failed_ms = 0,
          expired_ms = 0, cancelling_ms = 0, cancelled_ms = 0;
};

// One input line accepted as a job (job_id empty: refused; error_json says why).
struct batch_line {
  int64_t line_idx = 0;
  std::string custom_id;
  std::string job_id;              // set by accept_chunk when empty and request_json is not
  std::string request_json;        // the job spec; empty = refused
  std::string error_json;
  bool store_content = true;
};

// A batch's jobs by state (the request_counts; jobs of refused lines count as failed).
struct batch_counts {
  int64_t n_lines = 0, n_done = 0, n_completed = 0, n_failed = 0, n_open = 0;
};

// One line's outcome for the output / error files, in line order.
struct batch_result {
  int64_t line_idx = 0;
  std::string custom_id, job_id, error_json;
};

class batch_store {
 public:
  // Open the job store's file (already migrated by store::open). nullptr with *error.
  static std::unique_ptr<batch_store> open(const std::string& db_path, std::string* error);
  ~batch_store();

  // --- files ---
  bool add_file(const file_row& f);
  std::optional<file_row> get_file(const std::string& id, const std::string& tenant);  // tenant "" = any
  std::vector<file_row> list_files(const std::string& tenant, int32_t limit);
  // Mark deleted; the row's path (to remove), or nullopt when absent.
  std::optional<std::string> delete_file(const std::string& id, const std::string& tenant);

  // --- batches ---
  std::optional<batch_row> create_batch(batch_row b);  // id and created_ms filled
  std::optional<batch_row> get_batch(const std::string& id, const std::string& tenant);
  // Newest first; after: a batch id (exclusive cursor) or "".
  std::vector<batch_row> list_batches(const std::string& tenant, const std::string& after, int32_t limit);
  std::vector<batch_row> list_open();   // validating, in_progress, finalizing, cancelling
  std::vector<batch_row> list_all(const std::string& tenant);  // tenant deletion
  // Move from one status to another (compare-and-set), setting `<to>_ms` = now and the given columns.
  bool transition(const std::string& id, batch_status from, batch_status to,
                  const std::vector<std::pair<std::string, std::string>>& text_cols = {},
                  const std::vector<std::pair<std::string, int64_t>>& int_cols = {});
  bool set_counts(const std::string& id, int64_t n_completed, int64_t n_failed);

  // Accept lines as jobs in ONE transaction: each line with a request becomes a queued job (status
  // event, job_keys row), each line gets a batch_jobs row, and the batch's n_accepted becomes
  // next_line (the resume point). Only while the batch is validating or in_progress. false on a write
  // failure (nothing of the chunk is kept) or when the batch moved on.
  // NOTE: no publish outbox row: batch jobs reach Redis through api::batch_feeder (a bounded window,
  // fair between tenants), which reads batch_jobs from its cursor.
  bool accept_chunk(const batch_row& b, std::vector<batch_line>& lines, int64_t next_line, job_priority priority);

  // --- the feeder's cursor and reads (api/batch_feeder.cpp) ---
  // Lines [0, cursor) were handed to Redis (service_cursors "batch_feed:<id>"; 0 when none).
  int64_t feed_cursor(const std::string& batch_id);
  bool set_feed_cursor(const std::string& batch_id, int64_t next_line);
  // Lines with line_idx >= from, in order, at most limit: (line_idx, job_id; "" = a refused line).
  std::vector<std::pair<int64_t, std::string>> feed_lines(const std::string& batch_id, int64_t from, int32_t limit);
  // Jobs of lines [from, below) still queued and not updated since cutoff_ms: published, and maybe
  // lost from Redis since (the feeder checks Redis and publishes again). (line_idx, job_id), in order.
  std::vector<std::pair<int64_t, std::string>> queued_lines(const std::string& batch_id, int64_t from, int64_t below,
                                                            int64_t cutoff_ms, int32_t limit);

  batch_counts counts(const std::string& batch_id);
  // Jobs of the batch not yet terminal (cancel / expire).
  std::vector<std::string> open_jobs(const std::string& batch_id, int32_t limit);
  // Lines in order from line_idx >= from, at most limit.
  std::vector<batch_result> results(const std::string& batch_id, int64_t from, int32_t limit);
  // Deliveries of a batch event ("batch.completed", ...) to the tenant's OpenAI webhook endpoints
  // subscribed to it (webhook_deliveries; the dispatcher sends them). The number enqueued.
  int32_t enqueue_webhooks(const batch_row& b, const std::string& type);

  // Everything of a tenant (DELETE /v1/tenants/{t}): files, batches and their line rows; the paths
  // (relative to the files directory) whose bytes the caller removes.
  std::vector<std::string> delete_tenant(const std::string& tenant);
  // Retention: final batches that ended before cutoff_ms go with their output / error files (input
  // files stay until deleted). The paths to remove.
  std::vector<std::string> sweep(int64_t cutoff_ms, int32_t limit);

  int64_t now() const;  // ms since the epoch

 private:
  explicit batch_store(std::unique_ptr<conn> c);
  std::mutex mu_;
  std::unique_ptr<conn> c_;
};

}  // namespace agentq::store
