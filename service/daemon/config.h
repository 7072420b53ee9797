// agentqd configuration: defaults < --config FILE (JSON) < environment < flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace agentq::daemon {

enum class role { all, api, worker };

struct config {
  enum role role = role::all;
  std::string listen = "127.0.0.1:8080";          // HOST:PORT (port 0 = any free port)
  std::string data_dir = "./agentq-data";         // SQLite db, redis AOF, KV spill, logs
  std::string redis;                              // redis://... or sentinel://...; empty = embedded
  std::vector<std::string> models;                // GGUF paths; name = file stem
  std::string allow_addresses;                    // CIDR list exempt from the SSRF guard
  std::string admin_key;                          // ensure this admin key exists; empty = bootstrap
  // HTTP io threads; 0 = one per two cores, 2 to 8. NOTE: few on purpose (issue 29): each wakes once
  // for many connections' events and answers; handlers that may block run on the blocking pool.
  int32_t http_threads = 0;
  int32_t http_blocking_threads = 16;  // the pool's threads (http/blocking_pool.h): writes waiting for a commit
  int32_t max_connections = 1024;
  int64_t max_body_bytes = 4 << 20;
  double rate_limit = 50;                         // requests/s per key (0 = off)
  double rate_burst = 100;
  std::vector<int64_t> webhook_schedule_ms;       // empty = the default (5s .. 10h)
  int64_t webhook_timeout_ms = 10000;
  int32_t max_jobs = 0;                           // worker: jobs held at once (0 = 64 per engine replica of the model)
  int32_t max_batch_jobs = 0;                     // worker: of max_jobs, batch-class jobs at most (0 = 3/4 of max_jobs)
  double batch_end_linger_ms = 20;                // worker: batch-class job ends grouped (worker/end_batcher.h)
  std::string worker_id;                          // worker: stable id; empty = from host + data dir (DATA_DIR/worker-id)
  int64_t kv_budget_mb = 256;
  // KV residency and the spill tier (docs/kv_and_batching.md "Restarts and deploys"):
  double shutdown_spill_s = 5;                    // SIGTERM / drain: write resident KV to disk for this long at most
  double spill_after_s = 5;                       // a pinned requires_action wait is also written to disk after this
  int64_t spill_budget_mb = 4096;                 // spill files at most (per model; 0 = unlimited)
  double kv_idle_ttl_s = 60;                      // a finished turn's KV without a park
  double kv_pin_max_wait_s = 30;                  // waits up to this stay pinned
  double kv_pin_relaxed_wait_s = 300;             // ...and up to this while at most half the pool is used
  int32_t kv_spill_min_tokens = 64;               // shorter sequences are dropped, not spilled
  double client_tool_park_s = 300;                // expected wait of a requires_action job (the park hint)
  double response_kv_ttl_s = 600;                 // a stored response's KV kept for previous_response_id (0 = not kept)
  std::string kv_type;                            // f16 | f32; empty = the device's default (cpu f16, cuda f32)
  int32_t engine_threads = 0;                     // CPU threads per engine (0 = one per core)
  int32_t engine_replicas = 1;                    // data-parallel replicas per model (0 = auto: engine_config::n_replicas)
  // Nice increment of the threads that run jobs (engine loop and pool, the worker's dispatcher and
  // job threads), so the HTTP threads and the store's writer win the CPUs from them (0 = off).
  int32_t worker_nice = 10;
  std::string device = "cpu";                     // where the engines run: cpu | cuda | cuda:N (no fallback)
  std::string chat_family;                        // prompt format for every model; empty = from its template
  // Per model (same index as models): a --chat-family given after that --model, or a config file
  // model's "chat_family"; "" = chat_family above.
  std::vector<std::string> model_chat_families;
  // Per model (same index as models): a --draft-model given after that --model (or a config file
  // model's "draft_model"): a small GGUF with the same vocabulary that proposes tokens; "" = none.
  std::vector<std::string> model_drafts;
  bool spec = true;                               // speculative decoding (--spec on|off, --no-spec)
  std::string log_level = "info";
  std::string log_format = "text";                // text | json (one object per line, job_id field)
  std::string metrics_token;                      // non-empty: GET /metrics needs this bearer token
  std::string port_file;                          // write the bound port here (tests, scripts)
  std::string tls_cert;                           // PEM certificate chain: the API listener speaks HTTPS
  std::string tls_key;                            // PEM private key of tls_cert (both or neither)
  // Dispatch timing (worker role; tests shorten them): a job's SQLite lease, how often held entries are
  // touched in Redis, how long an entry must sit idle before another worker reclaims it, how often
  // workers sweep for such entries, and deliveries before a job is dead-lettered.
  int64_t lease_ms = 30000;
  int64_t heartbeat_ms = 2000;
  int64_t reclaim_idle_ms = 30000;
  int64_t reclaim_interval_ms = 5000;
  int32_t max_deliveries = 5;
  double retention_days = 30;                     // finished jobs deleted after this (per-key override); 0 = never
  // Batch API and back-pressure (issue 29; docs/openai.md "Batch"):
  int64_t max_file_bytes = int64_t(200) << 20;    // one POST /v1/files upload (streamed to DATA_DIR/files)
  int64_t max_queue_depth = 0;                    // queued jobs in all; past it submits get 429 queue_full (0 = none)
  int64_t max_queue_depth_per_tenant = 0;         // queued jobs of one tenant (0 = none)
  int64_t tenant_tokens_per_day = 0;              // a tenant's input + output tokens per UTC day; past it 429 (0 = none)
  int64_t tenant_max_running = 0;                 // a tenant's running jobs at once; more wait queued (0 = none)
  // Models known from the fleet (#28): a model only workers load stays known this long after a
  // live worker last advertised it (0 = only while one does).
  double model_ttl_h = 24;
  // Remote workers (#28; docs/deploy.md "Remote workers"):
  std::string remote;                             // worker: the control plane's base URL; opens no database
  std::string control_plane_token;                // worker: the worker token it presents (--remote)
  std::string worker_token;                       // control plane: accept remote workers presenting this token
  std::string worker_tokens_file;                 // control plane: per-worker tokens ("worker_id token" lines)
  int32_t protocol_version = 3;                   // message protocol spoken (the previous/next one for upgrades)
};

// Parse argv (and the environment, and --config); nullopt with *error (usage) on bad input.
// *help is set for --help.
std::optional<config> parse_config(int argc, char** argv, std::string* error, bool* help);
const char* usage();

}  // namespace agentq::daemon
