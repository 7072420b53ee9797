// What a worker reads and writes about its jobs, behind one interface: the local implementation
// calls the job store directly (all-in-one and split roles sharing the SQLite file); the remote one
// (remote_control_plane.h) sends each call as a message to the control plane, which applies it with
// the same fenced store calls (api/worker_protocol.h). Every write answers ok | fenced | not_found |
// invalid | error like store::store, and is done only when it answered ok.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace agentq::worker {

// A read the control plane could not answer (unreachable, or an error on its side): the job is not
// known to be lost, so the worker neither acks nor fails it; its lease lapses if this persists.
struct link_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class control_plane {
 public:
  virtual ~control_plane() = default;

  // --- claims and leases ----------------------------------------------------------
  // store::store::fence_worker_leases: jobs the previous run of worker_id held (throws on failure).
  virtual std::vector<std::string> fence_worker_leases(const std::string& worker_id) = 0;
  virtual store::claim_result claim_job(const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                                        int32_t max_attempts) = 0;
  // claim_job for each (job id, answer in the same order). The default claims one after the other;
  // the local control plane queues them together, so they share one transaction (one fsync).
  virtual std::vector<store::claim_result> claim_jobs(const std::vector<std::string>& job_ids,
                                                      const std::string& worker_id, int64_t lease_ms,
                                                      int32_t max_attempts) {
    std::vector<store::claim_result> out;
    for (const auto& id : job_ids) out.push_back(claim_job(id, worker_id, lease_ms, max_attempts));
    return out;
  }
  // Job ids whose lease is lost (epoch moved or terminal); empty also when the control plane is unreachable
  // (the leases then lapse by themselves).
  virtual std::vector<std::string> renew_leases(std::vector<std::pair<std::string, int64_t>> jobs, int64_t lease_ms) = 0;

  // --- reads ------------------------------------------------------------------------
  // A job's row. NOTE: for a job the caller does not hold, a remote worker gets its state alone
  // (status, priority, lease; no request, result or error: api/worker_protocol.cpp "read fence").
  virtual std::optional<store::job_row> get_job(const std::string& job_id) = 0;
  virtual std::map<std::string, std::string> job_models(const std::vector<std::string>& job_ids) = 0;
  // A job's content, read under the caller's lease (epoch: the claim's). The remote control plane
  // answers only the worker holding that lease; otherwise it throws link_error (the job is lost here).
  virtual std::vector<store::transcript_row> read_transcript(const std::string& job_id, int64_t epoch) = 0;
  virtual std::vector<store::tool_output> read_tool_results(const std::string& job_id, int64_t epoch) = 0;
  virtual std::vector<std::string> cancelled_among(const std::vector<std::string>& job_ids) = 0;
  // KV keys (worker/kv_retention.h job_key_of) of jobs queued, running or waiting on a client: spill
  // files of other keys may go. Throws when it cannot say.
  virtual std::set<uint64_t> live_kv_keys() = 0;
  // The "whsec_" secret signing this job's tool requests; "" = unsigned. The remote control plane
  // hands it over with the claim (only to the worker running the job).
  virtual std::string tool_secret(const std::string& job_id, const std::string& tenant) = 0;

  // --- fenced writes (store::store's contracts) ----------------------------------------
  virtual store::write_status init_transcript(const std::string& job_id, int64_t epoch,
                                              std::vector<store::transcript_row> input) = 0;
  virtual store::write_status commit_turn(const std::string& job_id, int64_t epoch, store::turn_commit turn) = 0;
  // store::store::commit_step: init_transcript, commit_turn, finish_job (the parts present) as one
  // write. The default sends them one after the other (a remote worker: the protocol's messages,
  // unchanged), stopping at the first answer that is not ok; local: one store op.
  virtual store::write_status commit_step(const std::string& job_id, int64_t epoch, store::step_commit step) {
    store::write_status ws = store::write_status::ok;
    if (!step.input.empty()) ws = init_transcript(job_id, epoch, std::move(step.input));
    if (ws == store::write_status::ok && step.turn) ws = commit_turn(job_id, epoch, std::move(*step.turn));
    if (ws == store::write_status::ok && step.end)
      ws = finish_job(job_id, epoch, step.end->status, std::move(step.end->result_json), std::move(step.end->error),
                      step.end->usage);
    return ws;
  }
  // commit_step, answered through done instead of a return value. The default calls commit_step and
  // then done on the caller's thread (a remote worker: the protocol's messages, unchanged); the local
  // control plane queues it and done runs on the store's writer thread once the commit is durable
  // (store::commit_step_async: quick, never waiting on the store). Throws as commit_step does, and
  // then done is not called.
  virtual void commit_step_async(const std::string& job_id, int64_t epoch, store::step_commit step,
                                 std::function<void(store::write_status)> done) {
    done(commit_step(job_id, epoch, std::move(step)));
  }
  // True when commit_step_async only queues (the local control plane): the worker may then end a
  // job on the engine's thread, which must never wait on the store or the network.
  virtual bool commits_async() const { return false; }
  // commit_step for each item (answers in order). The default sends them one after the other; the
  // local control plane writes them in one transaction (store::commit_steps).
  virtual std::vector<store::write_status> commit_steps(std::vector<store::step_item> items) {
    std::vector<store::write_status> out;
    out.reserve(items.size());
    for (auto& it : items) out.push_back(commit_step(it.job_id, it.epoch, std::move(it.step)));
    return out;
  }
  virtual store::write_status record_tool_result(const std::string& job_id, int64_t epoch, store::tool_output output,
                                                 std::string name) = 0;
  virtual store::write_status require_action(const std::string& job_id, int64_t epoch, std::string pending_calls_json) = 0;
  virtual store::write_status finish_job(const std::string& job_id, int64_t epoch, store::job_status status,
                                         std::string result_json, std::string error, store::usage_totals usage) = 0;
  virtual store::write_status release_job(const std::string& job_id, int64_t epoch) = 0;
  // A progress event; NOTE: callers need not wait (token events are sent from the engine's callback).
  virtual std::future<store::write_status> append_event(const std::string& job_id, int64_t epoch, std::string type,
                                                        std::string data_json) = 0;

  // Non-empty: the control plane refused this worker (e.g. a protocol version it does not accept);
  // the worker stops claiming and advertises the reason.
  virtual std::string refused() const { return {}; }
  // The worker-message protocol this link speaks (advertised); 1 = direct SQLite.
  virtual int protocol_version() const = 0;
};

// The KV keys of the store's live jobs (control_plane::live_kv_keys; also the control plane's answer).
std::set<uint64_t> live_kv_keys_of(store::store& db);

// Direct calls on the job store. secret: the key store's webhook_secret_for; empty = unsigned.
std::unique_ptr<control_plane> make_local_control_plane(
    store::store& db, std::function<std::string(const std::string& job_id, const std::string& tenant)> secret = {});

}  // namespace agentq::worker
