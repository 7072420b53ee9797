// The local control plane: a worker's reads and fenced writes as direct calls on the job store
// (all-in-one agentqd, and split roles sharing the SQLite file). Behaviour of before #28's remote
// workers, unchanged.
#include <latch>
#include <memory>

#include "worker/control_plane.h"
#include "worker/kv_retention.h"
#include "util/version.h"

namespace agentq::worker {

namespace {

class local_control_plane final : public control_plane {
 public:
  local_control_plane(store::store& db, std::function<std::string(const std::string&, const std::string&)> secret)
      : db_(db), secret_(std::move(secret)) {}

  std::vector<std::string> fence_worker_leases(const std::string& worker_id) override {
    return db_.fence_worker_leases(worker_id).get();
  }
  store::claim_result claim_job(const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                                int32_t max_attempts) override {
    return db_.claim_job(job_id, worker_id, lease_ms, max_attempts).get();
  }
  std::vector<store::claim_result> claim_jobs(const std::vector<std::string>& job_ids, const std::string& worker_id,
                                              int64_t lease_ms, int32_t max_attempts) override {
    // NOTE: one latch for the batch, not a future a claim: a promise's set_value is a futex wake
    // even when nobody waits, and each future the dispatcher waited on another (issue 29: ~1.3 futex
    // calls a claim on the writer). The writer answers the claims in order, the last one wakes us.
    // std::latch: count_down's release orders each answer before wait()'s return.
    struct batch {
      explicit batch(size_t n) : done(std::ptrdiff_t(n)), out(n) {}
      std::latch done;
      std::vector<store::claim_result> out;  // each slot written by its own callback only
    };
    auto b = std::make_shared<batch>(job_ids.size());  // shared: the last count_down may still be in its notify
    for (size_t i = 0; i < job_ids.size(); ++i)
      db_.claim_job_async(job_ids[i], worker_id, lease_ms, max_attempts, [b, i](store::claim_result r) {
        b->out[i] = std::move(r);
        b->done.count_down();
      });
    b->done.wait();
    return std::move(b->out);
  }
  std::vector<std::string> renew_leases(std::vector<std::pair<std::string, int64_t>> jobs, int64_t lease_ms) override {
    return db_.renew_leases(std::move(jobs), lease_ms).get();
  }
  std::optional<store::job_row> get_job(const std::string& job_id) override { return db_.get_job(job_id); }
  std::map<std::string, std::string> job_models(const std::vector<std::string>& ids) override {
    return db_.job_models(ids);
  }
  std::vector<store::transcript_row> read_transcript(const std::string& job_id, int64_t) override {
    return db_.read_transcript(job_id);
  }
  std::vector<store::tool_output> read_tool_results(const std::string& job_id, int64_t) override {
    return db_.read_tool_results(job_id);
  }
  std::vector<std::string> cancelled_among(const std::vector<std::string>& ids) override {
    return db_.cancelled_among(ids);
  }
  std::set<uint64_t> live_kv_keys() override { return live_kv_keys_of(db_); }
  std::string tool_secret(const std::string& job_id, const std::string& tenant) override {
    return secret_ ? secret_(job_id, tenant) : std::string();
  }
  store::write_status init_transcript(const std::string& job_id, int64_t epoch,
                                      std::vector<store::transcript_row> input) override {
    return db_.init_transcript(job_id, epoch, std::move(input)).get();
  }
  store::write_status commit_turn(const std::string& job_id, int64_t epoch, store::turn_commit turn) override {
    return db_.commit_turn(job_id, epoch, std::move(turn)).get();
  }
  store::write_status commit_step(const std::string& job_id, int64_t epoch, store::step_commit step) override {
    return db_.commit_step(job_id, epoch, std::move(step)).get();
  }
  void commit_step_async(const std::string& job_id, int64_t epoch, store::step_commit step,
                         std::function<void(store::write_status)> done) override {
    db_.commit_step_async(job_id, epoch, std::move(step), std::move(done));
  }
  bool commits_async() const override { return true; }
  std::vector<store::write_status> commit_steps(std::vector<store::step_item> items) override {
    return db_.commit_steps(std::move(items)).get();
  }
  store::write_status record_tool_result(const std::string& job_id, int64_t epoch, store::tool_output output,
                                         std::string name) override {
    return db_.record_tool_result(job_id, epoch, std::move(output), std::move(name)).get();
  }
  store::write_status require_action(const std::string& job_id, int64_t epoch, std::string pending) override {
    return db_.require_action(job_id, epoch, std::move(pending)).get();
  }
  store::write_status finish_job(const std::string& job_id, int64_t epoch, store::job_status status,
                                 std::string result_json, std::string error, store::usage_totals usage) override {
    return db_.finish_job(job_id, epoch, status, std::move(result_json), std::move(error), usage).get();
  }
  store::write_status release_job(const std::string& job_id, int64_t epoch) override {
    return db_.release_job(job_id, epoch).get();
  }
  std::future<store::write_status> append_event(const std::string& job_id, int64_t epoch, std::string type,
                                                std::string data_json) override {
    return db_.append_event(job_id, epoch, std::move(type), std::move(data_json));
  }
  int protocol_version() const override { return k_protocol_version; }

 private:
  store::store& db_;
  std::function<std::string(const std::string&, const std::string&)> secret_;
};

}  // namespace

std::set<uint64_t> live_kv_keys_of(store::store& db) {
  std::set<uint64_t> live;
  for (auto st : {store::job_status::requires_action, store::job_status::queued, store::job_status::running}) {
    std::string before;
    for (;;) {
      auto rows = db.list_jobs("", st, 1000, before);
      for (const auto& r : rows) live.insert(job_key_of(kv_chain_of(r.request_json, r.id)));
      if (rows.size() < 1000) break;
      before = rows.back().id;
    }
  }
  // NOTE: three reads, not one snapshot: a job changing state between them may be missed and
  // its file deleted; the cost is a re-prefill of that job, never a wrong answer.
  return live;
}

std::unique_ptr<control_plane> make_local_control_plane(
    store::store& db, std::function<std::string(const std::string&, const std::string&)> secret) {
  return std::make_unique<local_control_plane>(db, std::move(secret));
}

}  // namespace agentq::worker
