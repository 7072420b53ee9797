// A remote worker's link to the control plane (#28): every control_plane call, timeline write and
// engine sample becomes a protocol message (worker/protocol.h) sent to POST /v1/worker/messages with
// the worker token. One sender thread sends the queued messages in order, batched, and retries a
// batch (same msg_ids: the control plane answers a repeat with its first reply) until it is
// answered or retry_for_ms passes; a call returns once its message is answered. The worker thus
// opens no database file.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "obs/sinks.h"
#include "worker/control_plane.h"

namespace agentq::net {
class http_client;
}

namespace agentq::worker {

struct remote_options {
  std::string url;                  // the control plane's base URL, http[s]://host:port
  std::string token;                // the worker token (Authorization: Bearer)
  int version = 3;                  // message protocol spoken (protocol::k_message_version; --protocol-version)
  std::string worker_id, incarnation;  // msg_id = <worker_id>:<incarnation>:<seq>
  int64_t request_timeout_ms = 10000;  // one HTTP exchange
  int64_t retry_for_ms = 30000;     // keep resending an unanswered batch this long (the lease), then error
  size_t max_batch = 256;           // messages per request
};

class remote_control_plane final : public control_plane, public obs::timeline_sink, public obs::sample_sink {
 public:
  explicit remote_control_plane(remote_options options);
  ~remote_control_plane() override;  // answers what is still queued with error

  // control_plane
  std::vector<std::string> fence_worker_leases(const std::string& worker_id) override;
  store::claim_result claim_job(const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                                int32_t max_attempts) override;
  std::vector<std::string> renew_leases(std::vector<std::pair<std::string, int64_t>> jobs, int64_t lease_ms) override;
  std::optional<store::job_row> get_job(const std::string& job_id) override;
  std::map<std::string, std::string> job_models(const std::vector<std::string>& job_ids) override;
  std::vector<store::transcript_row> read_transcript(const std::string& job_id, int64_t epoch) override;
  std::vector<store::tool_output> read_tool_results(const std::string& job_id, int64_t epoch) override;
  std::vector<std::string> cancelled_among(const std::vector<std::string>& job_ids) override;
  std::set<uint64_t> live_kv_keys() override;
  std::string tool_secret(const std::string& job_id, const std::string& tenant) override;
  store::write_status init_transcript(const std::string& job_id, int64_t epoch,
                                      std::vector<store::transcript_row> input) override;
  store::write_status commit_turn(const std::string& job_id, int64_t epoch, store::turn_commit turn) override;
  store::write_status record_tool_result(const std::string& job_id, int64_t epoch, store::tool_output output,
                                         std::string name) override;
  store::write_status require_action(const std::string& job_id, int64_t epoch, std::string pending_calls_json) override;
  store::write_status finish_job(const std::string& job_id, int64_t epoch, store::job_status status,
                                 std::string result_json, std::string error, store::usage_totals usage) override;
  store::write_status release_job(const std::string& job_id, int64_t epoch) override;
  std::future<store::write_status> append_event(const std::string& job_id, int64_t epoch, std::string type,
                                                std::string data_json) override;
  std::string refused() const override;
  int protocol_version() const override { return options_.version; }

  // timeline_sink, sample_sink
  bool record(const std::string& job_id, int64_t epoch, const obs::timeline_entry& e) override;
  bool close_open(const std::string& job_id, int64_t epoch, const std::string& kind, int64_t end_ms) override;
  bool write_sample(const std::string& worker_id, const obs::engine_sample& s, const nlohmann::json& families) override;
  void prune(int64_t) override {}  // NOTE: the control plane prunes samples itself

  struct link_stats {
    int64_t n_messages = 0, n_requests = 0, n_retries = 0;
  };
  link_stats stats() const;

 private:
  struct pending {
    nlohmann::json msg;
    std::promise<nlohmann::json> reply;
  };
  // Queue one message; the future holds its reply ({status, result, error}).
  std::future<nlohmann::json> send(const std::string& kind, const std::string& job_id, int64_t epoch,
                                   nlohmann::json body, const std::string& worker_id = {});
  nlohmann::json call(const std::string& kind, const std::string& job_id, int64_t epoch, nlohmann::json body,
                      const std::string& worker_id = {});
  store::write_status write(const std::string& kind, const std::string& job_id, int64_t epoch, nlohmann::json body);
  // A read's result; throws link_error unless the status is ok (or not_found where allowed). epoch:
  // the lease a read of a job's content is made under (0 = none held).
  nlohmann::json read(const std::string& kind, const std::string& job_id, nlohmann::json body, int64_t epoch = 0);
  void sender_loop();
  // One POST of the batch; fills replies (same order) or returns false with *why (retryable).
  bool post(std::vector<std::unique_ptr<pending>>& batch, std::string* why, bool* fatal);
  void forget_job(const std::string& job_id);

  remote_options options_;
  std::unique_ptr<net::http_client> http_;
  std::atomic<int64_t> seq_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<pending>> queue_;
  bool stopping_ = false;
  std::string refused_;
  // Handed over with a claim: the first reads of the transcript / tool results (saving a round trip)
  // and the job's signing secret, kept while the job runs here.
  struct claimed {
    std::optional<std::vector<store::transcript_row>> transcript;
    std::optional<std::vector<store::tool_output>> tool_results;
    std::string secret;
  };
  std::map<std::string, claimed> claimed_;
  link_stats stats_;
  std::thread sender_;
};

}  // namespace agentq::worker
