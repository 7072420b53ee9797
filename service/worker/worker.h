// A worker: claims jobs from the queue, runs many jobs' agent loops at once on one engine
// (render -> generate -> parse tool calls -> run tools -> append -> continue), commits each
// turn before its tools run, and resumes crashed jobs from the last committed turn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "worker/model_share.h"

namespace agentq {
class engine;
struct engine_config;
}  // namespace agentq
namespace agentq::store {
class store;
}
namespace agentq::queue {
class queue;
}
namespace agentq::obs {
class timeline_sink;
}

namespace agentq::worker {

class control_plane;

// A server-side tool call: POST {job_id, call_id, name, arguments} to url.
struct http_tool_request {
  std::string url;
  std::string body_json;
  std::string job_id, call_id;         // also for signing headers (webhook-id = call_id)
  std::string secret;                  // "whsec_..." that signs the request (the job's key's); empty = unsigned
  int32_t timeout_ms = 10000;
  int64_t max_response_bytes = 1 << 20;
};
struct http_tool_response {
  bool ok = false;                     // transport ok and 2xx
  int32_t status = 0;                  // HTTP status; 0 = no response
  std::string body;
  std::string error;                   // transport error / too large / timeout
  bool retryable = false;              // 5xx, 429, timeouts, connection errors
};
// Blocking; called on a tool thread. The default is a plain HTTP/1.1 client (worker/http_tool.cpp);
// the daemon plugs in net/http_client (SSRF guard, TLS) with webhook-style signing.
using http_tool_fn = std::function<http_tool_response(const http_tool_request&)>;

struct worker_options {
  std::string worker_id;               // empty = "<hostname>-<pid>-<random>" (agentqd: worker/identity.h)
  // This run of worker_id (worker_identity::incarnation); empty = a fresh random one. At start the
  // worker fences the leases its id still holds in SQLite, takes the id over in Redis and re-handles
  // its pending entries; a later heartbeat that finds another run holding the id stops this one
  // claiming (superseded) and drops its jobs, which are fenced already.
  std::string incarnation;
  int32_t n_engine_threads = 0;        // advertised (0 = one per core)
  model_share share;                   // how the process shares its device between its models (advertised)
  // The model this worker serves (its engine's name): it reads that model's streams (and the legacy
  // model-less ones, re-routing entries for other models). Empty = the legacy streams only.
  std::string model;
  std::string group;                   // the process's base worker id, advertised (several models: one worker each)
  int32_t max_jobs = 64;               // jobs held at once
  // Of those max_jobs slots, batch-class jobs hold at most this many, so the rest stay free for
  // the other classes (high, normal, low) while a Batch file fills the worker; <= 0 or >= max_jobs
  // = no reserve (batch jobs may take every slot).
  int32_t max_batch_jobs = 0;
  int64_t lease_ms = 30000;            // SQLite lease; renewed every lease_ms/3
  int64_t heartbeat_ms = 2000;         // Redis alive key + idle reset of held entries
  int64_t cancel_poll_ms = 100;        // how often held jobs are checked for cancellation
  int64_t reclaim_interval_ms = 5000;  // XAUTOCLAIM sweep
  int32_t read_block_ms = 200;
  int32_t n_tool_threads = 8;
  double client_tool_park_s = 300;     // park() hint while waiting on a client
  // A stored OpenAI response ("keep_kv" in its spec) that completes keeps its KV parked this long
  // for a previous_response_id continuation, then releases it (and its spill file); 0 = release
  // at the end like any job.
  double response_kv_ttl_s = 600;
  // stop(): write the engine's resident KV to its spill tier for this long at most, so a
  // restarted worker resumes its jobs without a re-prefill (engine::spill_for_shutdown); < 0 = off.
  double shutdown_spill_s = -1;
  // The "whsec_" secret that signs a job's server-side tool requests (Standard Webhooks): the
  // secret of the API key that submitted it (auth::key_store::webhook_secret_for); "" = unsigned.
  // Empty function = every request unsigned.
  std::function<std::string(const std::string& job_id, const std::string& tenant)> tool_secret;
  std::string tool_allow_cidrs;        // SSRF allow-list for tool URLs, e.g. "127.0.0.0/8" (tests)
  // A batch-class job's end waits up to this long for other jobs' ends to share one transaction and
  // one ack round trip (worker/end_batcher.h); 0 = each job commits and acks alone.
  int64_t batch_end_linger_us = 20000;
  int32_t max_deliveries = 5;          // claims before a job is dead-lettered
  http_tool_fn http_tool;              // empty = built-in client
  obs::timeline_sink* timeline = nullptr;  // records tool and KV-parking spans of job timelines; nullptr = none
};

struct worker_stats {
  int64_t n_claimed = 0, n_completed = 0, n_failed = 0, n_cancelled = 0, n_requires_action = 0;
  int64_t n_turns = 0, n_tool_calls = 0, n_fenced = 0, n_resumed = 0;
  int64_t n_ended_where_landed = 0;      // final turns ended where their result landed (no job thread)
  int32_t n_job_threads = 0;             // the job pool's threads started so far
  int32_t n_active = 0;                  // held jobs, those whose loop ended included until the dispatcher reaps them
  int32_t n_running = 0;                 // held jobs whose loop has not ended
  int64_t n_leases_fenced_at_start = 0;  // jobs the previous run of this id still held
  bool superseded = false;               // another process took this worker id over
};

class worker {
 public:
  // The engine is shared (the daemon may own it); the worker starts/stops its loop thread
  // only if start_engine. store and queue must outlive the worker.
  worker(worker_options options, std::shared_ptr<engine> engine, store::store& store, queue::queue& queue,
         bool start_engine = true);
  // The same on a control plane (worker/control_plane.h: local, or a remote worker's link); cp outlives it.
  worker(worker_options options, std::shared_ptr<engine> engine, control_plane& cp, queue::queue& queue,
         bool start_engine = true);
  ~worker();                           // stop(): held jobs are released back to the queue
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  // Also deletes spill files of jobs that ended while no worker held their KV.
  void start();
  // Stop claiming; release running jobs back to queued (their transcript stays), join threads,
  // then spill resident KV (shutdown_spill_s).
  void stop();
  const std::string& id() const;
  // A job was deleted (DELETE /v1/jobs, /v1/responses): release the KV it holds here, if any.
  void job_deleted(const std::string& job_id);
  worker_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Load a model for a worker; nullptr with *error set on failure (see engine::load).
std::shared_ptr<engine> load_engine(const engine_config& config, std::string* error);

}  // namespace agentq::worker
