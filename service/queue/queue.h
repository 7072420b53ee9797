// Dispatch over Redis Streams (transport, not truth): one consumer group per priority stream
// (agentq:jobs:<model>:high|normal|low|batch), a per-worker stream for continuations, XAUTOCLAIM reclaim,
// a dead-letter stream, the outbox relay (SQLite -> Redis) and the reconciler.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "queue/redis_client.h"

namespace agentq::store {
class store;
}

namespace agentq::queue {

struct queue_options {
  redis_options redis;
  std::string prefix = "agentq";          // key prefix
  std::string group = "workers";          // consumer group on every stream
  int64_t reclaim_idle_ms = 30000;        // XAUTOCLAIM entries idle longer than this
  int32_t max_deliveries = 5;             // claims before a job is dead-lettered and failed
  int64_t heartbeat_ttl_ms = 10000;       // worker alive key TTL
  int64_t relay_interval_ms = 50;         // outbox poll when idle
  int64_t reconcile_interval_ms = 5000;
  int64_t reconcile_grace_ms = 2000;      // queued this long without being in Redis -> re-publish
  int32_t max_stream_len = 1000000;       // approximate MAXLEN on XADD
  // Publish each job to its model's stream (#28 routing; agentqd turns it on). Off: every job to the
  // legacy model-less streams, which every worker reads (library default, tests with one engine).
  bool route_by_model = false;
};

// One entry read from a stream.
struct delivery {
  std::string stream;                     // full key
  std::string entry_id;                   // stream entry id
  std::string job_id;
  bool continuation = false;              // from the worker's own stream
  bool reclaimed = false;                 // taken over from a stalled consumer
};

struct queue_stats {
  int64_t n_published = 0, n_read = 0, n_acked = 0, n_reclaimed = 0, n_dead_lettered = 0;
  int64_t n_relayed = 0, n_reconciled = 0;
  redis_stats redis;
};

class queue {
 public:
  queue(queue_options options, store::store& store);
  // Consumer side only (a remote worker, which opens no database): no relay or reconciler.
  explicit queue(queue_options options);
  ~queue();
  queue(const queue&) = delete;
  queue& operator=(const queue&) = delete;

  const queue_options& options() const { return options_; }
  std::string stream_key(int priority_idx) const;       // 0 high, 1 normal, 2 low, 3 batch (no model: the legacy streams)
  // A model's stream (#28 routing): PREFIX:jobs:<model>:<priority>; read only by workers serving it.
  std::string model_stream_key(const std::string& model, int priority_idx) const;
  std::string worker_stream_key(const std::string& worker_id) const;
  std::string dead_letter_key() const;

  // --- Relay + reconciler (run in any process that writes jobs) -------------
  // Background thread: drains "publish"/"continue" outbox rows into Redis, reconciles periodically.
  void start_relay();
  void stop_relay();
  // One pass each (tests, and the thread's body). Return how many jobs were (re)published.
  int32_t relay_once();
  int32_t reconcile_once();

  // --- Consumer side (a worker; call from one thread) -----------------------
  // A consumer serving `model` reads its own stream, then by priority (high, normal, low, batch)
  // the model's stream and the legacy model-less one (entries published before routing, or by an
  // older API: the worker re-routes one whose job is for another model). model "" = own + legacy.
  // Create the consumer groups (idempotent; also re-created after a Redis wipe).
  bool ensure_groups(const std::string& worker_id, const std::string& model = {});
  // Read up to max entries in that order, of which at most max_batch from the batch-class streams
  // (< 0 = max; 0 = none: the worker's batch jobs fill their share of its slots); blocks up to
  // block_ms when nothing is ready. Empty on timeout or Redis error.
  std::vector<delivery> read(const std::string& worker_id, int32_t max, int32_t block_ms, const std::string& model = {},
                             int32_t max_batch = -1);
  // End a blocking read() in progress now, as if its block_ms ran out (CLIENT UNBLOCK from another
  // connection): a stopping worker's dispatcher need not wait out its read. No-op before the first
  // blocking read; a read that starts after it still blocks its block_ms.
  void interrupt_reads();
  // XAUTOCLAIM entries idle > reclaim_idle_ms on the shared streams (the model's and the legacy
  // ones); at most max_batch of them from the batch-class streams (< 0 = max).
  std::vector<delivery> reclaim(const std::string& worker_id, int32_t max, const std::string& model = {},
                                int32_t max_batch = -1);
  // Reset the idle time of entries we are still working on (so they are not reclaimed).
  bool touch(const std::string& worker_id, const std::vector<delivery>& held);
  // Done with an entry (job terminal, waiting on a client, or claimed elsewhere).
  bool ack(const delivery& d);
  // ack for each, in one pipelined round trip (a worker's group of batch-class job ends); how many
  // were acked (a failed one stays pending: reclaimed later, and its claim finds the job over).
  int32_t ack_many(const std::vector<delivery>& ds);
  // Move to the dead-letter stream with a reason and ack.
  bool dead_letter(const delivery& d, const std::string& reason);
  // Worker liveness (SET key PX ttl) and lookup (continuation routing).
  bool heartbeat(const std::string& worker_id);
  bool is_alive(const std::string& worker_id);
  // Whether a continuation should wait for worker_id (KV-affine resume): alive, and its advert
  // (if any) neither refused by the control plane nor unhealthy (such a worker claims nothing, so
  // a continuation routed to it would wait for ever: it still heartbeats) nor overloaded (no free
  // slot at its last heartbeat: any worker re-prefills instead).
  bool can_resume(const std::string& worker_id);

  // --- Stable worker identities and the fleet registry (#28) ----------------
  // Entries this consumer read but never acked (a previous run of the same worker id): the worker
  // re-handles them at start instead of waiting for reclaim_idle_ms. Marked reclaimed.
  std::vector<delivery> read_pending(const std::string& worker_id, int32_t max, const std::string& model = {});
  enum class announce_result { ok, superseded /* another run of this id holds it */, error };
  // Heartbeat with an advert: the alive key holds this run's incarnation, PREFIX:worker:<id>:info the
  // advert JSON (both PX heartbeat_ttl_ms), PREFIX:workers (sorted set) the last heartbeat time.
  // take_over (a run's first heartbeat) claims the id from whatever run held it; later heartbeats
  // return superseded, and change nothing, once another run took it over.
  announce_result announce(const std::string& worker_id, const std::string& incarnation,
                           const std::string& advert_json, bool take_over);
  // The adverts of live workers (heartbeat within heartbeat_ttl_ms), JSON text each; forgets ids not
  // seen for a week. Empty on a Redis error.
  std::vector<std::string> list_workers();
  // Models some live worker serves (from the adverts' "models"), cached for a second; nullopt when
  // Redis cannot say (then nobody is told a model is unserved).
  std::optional<std::vector<std::string>> live_models();

  // Publish directly (the relay's primitive): XADD + record in the inflight hash, atomically.
  bool publish(const std::string& job_id, int priority_idx, const std::string& worker_id = {},
               const std::string& model = {});
  struct publish_item {
    std::string job_id;
    int priority_idx = 1;
    std::string worker_id;                // non-empty: that worker's continuation stream
    std::string model;                    // else non-empty: the model's stream; else the legacy stream
  };
  // Publish many in one pipelined round trip (one AOF fsync for the lot); per item: published?
  std::vector<bool> publish_many(const std::vector<publish_item>& items);

  // Entries in a stream (acked ones are deleted, so: published and not yet acked); nullopt on a
  // Redis error. The batch feeder's window (api/batch_feeder.cpp).
  std::optional<int64_t> stream_length(const std::string& stream);
  // Whether each job has an inflight mark (published, not acked); nullopt on a Redis error.
  std::optional<std::vector<bool>> in_flight(const std::vector<std::string>& job_ids);

  queue_stats stats() const;

 private:
  std::vector<std::string> ack_command(const delivery& d) const;  // the ack script's EVAL, for ack / ack_many
  std::vector<std::string> consumer_streams(const std::string& worker_id, const std::string& model) const;
  // A batch-class stream (the model's or the legacy one): its entries count against read's max_batch.
  bool is_batch_stream(const std::string& stream) const;
  // After a relay pass: a "waiting" event on each published job whose model no live worker serves.
  void note_unserved(const std::vector<publish_item>& items, const std::vector<bool>& published);

  struct impl;
  std::unique_ptr<impl> impl_;
  queue_options options_;
  store::store* store_ = nullptr;  // nullptr: consumer only
  std::atomic<bool> relay_running_{false};
  std::thread relay_thread_;
};

}  // namespace agentq::queue
