// Data-parallel replicas of one model behind the `engine` interface (see replica_set.h).
#include "replica_set.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gguf/reader.h"
#include "model/model.h"

namespace agentq {

int32_t resolve_replicas(const engine_config& config, int32_t cores) {
  if (config.n_replicas > 0) return config.n_replicas;
  if (config.device != "cpu" || config.n_threads > 0 || !config.draft_model_path.empty()) return 1;
  std::string err;
  auto file = gguf::file::open(config.model_path, &err);
  if (!file) return 1;  // engine::load reports the error
  uint64_t weight_bytes = 0;
  for (const auto& t : file->tensors()) weight_bytes += t.n_bytes;
  if (weight_bytes >= k_one_thread_model_bytes) return 1;
  // NOTE: 2 at most: measured on 2 cores only (docs/queue_perf.md, session 23); each replica is a
  // core's worth of steps, and the service's own threads (HTTP, the store's writer, the job
  // threads) need CPU beside them. --engine-replicas N asks for more.
  return std::clamp(cores, 1, 2);
}

namespace {

class replica_set final : public engine {
 public:
  replica_set(std::vector<std::unique_ptr<engine>> replicas)
      : n_(int32_t(replicas.size())), in_flight_(new std::atomic<int32_t>[replicas.size()]), r_(std::move(replicas)) {
    for (int32_t i = 0; i < n_; ++i) in_flight_[i] = 0;
    desc_ = r_[0]->model();
    desc_.n_replicas = n_;
    // NOTE: kv (the room one job's KV must fit in) stays one replica's: a job runs on one of them.
    desc_.kv_capacity_tokens = 0;
    for (auto& e : r_) desc_.kv_capacity_tokens += e->model().kv_capacity_tokens;
  }
  ~replica_set() override { stop(); }

  const model_desc& model() const override { return desc_; }
  std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const override {
    return r_[0]->tokenize(text, add_special, parse_special);
  }
  std::string detokenize(std::span<const token_id> ids) const override { return r_[0]->detokenize(ids); }
  std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const override {
    return r_[0]->render(messages, tools);
  }
  std::optional<std::string> validate(const turn_request& request) const override { return r_[0]->validate(request); }

  uint64_t submit(token_request request, token_callbacks callbacks) override {
    return route(std::move(request), std::move(callbacks));
  }
  uint64_t submit(turn_request request, turn_callbacks callbacks) override {
    return route(std::move(request), std::move(callbacks));
  }
  void cancel(uint64_t request_id) override {
    r_[size_t(request_id % uint64_t(n_))]->cancel(request_id / uint64_t(n_));
  }

  void park(uint64_t job_key, double expected_wait_s) override {
    for (int32_t r : homes(job_key, false)) r_[size_t(r)]->park(job_key, expected_wait_s);
  }
  void release(uint64_t job_key) override {
    for (int32_t r : homes(job_key, true)) r_[size_t(r)]->release(job_key);
  }

  bool step() override {
    bool did = false;
    for (auto& e : r_) did = e->step() || did;
    return did;
  }
  void start() override {
    for (auto& e : r_) e->start();
  }
  void stop() override {
    for (auto& e : r_) e->stop();
  }

  engine_stats stats() const override {
    engine_stats s;
    for (size_t i = 0; i < r_.size(); ++i) {
      const engine_stats e = r_[i]->stats();
      s.n_blocks_total += e.n_blocks_total;
      s.n_blocks_used += e.n_blocks_used;
      s.n_blocks_free += e.n_blocks_free;
      s.n_blocks_cached += e.n_blocks_cached;
      s.n_blocks_parked += e.n_blocks_parked;
      s.n_blocks_spilled += e.n_blocks_spilled;
      s.n_evictions += e.n_evictions;
      s.n_spills += e.n_spills;
      s.n_restores += e.n_restores;
      s.n_early_spills += e.n_early_spills;
      s.n_spill_corrupt += e.n_spill_corrupt;
      s.n_spill_bytes += e.n_spill_bytes;
      s.n_spill_budget_evictions += e.n_spill_budget_evictions;
      s.n_tokens_prompt += e.n_tokens_prompt;
      s.n_tokens_cached += e.n_tokens_cached;
      s.n_tokens_computed += e.n_tokens_computed;
      s.n_tokens_generated += e.n_tokens_generated;
      s.n_tokens_draft_accepted += e.n_tokens_draft_accepted;
      s.n_tokens_draft_rejected += e.n_tokens_draft_rejected;
      s.n_running += e.n_running;
      s.n_waiting += e.n_waiting;
      s.last_batch_tokens += e.last_batch_tokens;  // NOTE: the replicas' latest steps together
      if (!e.healthy && s.healthy) {
        s.healthy = false;
        s.failure = e.failure;
      }
    }
    return s;
  }

  kv_shutdown_report spill_for_shutdown(double budget_s) override {
    kv_shutdown_report all;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& e : r_) {
      const double left = budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const kv_shutdown_report rep = e->spill_for_shutdown(std::max(0.0, left));
      all.n_seqs += rep.n_seqs;
      all.n_written += rep.n_written;
      all.n_tokens += rep.n_tokens;
      all.n_bytes += rep.n_bytes;
      all.n_dropped += rep.n_dropped;
      all.n_tokens_dropped += rep.n_tokens_dropped;
      all.n_short += rep.n_short;
    }
    all.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return all;
  }
  int32_t prune_spill(const std::function<bool(uint64_t job_key)>& live) override {
    int32_t n = 0;
    for (auto& e : r_) n += e->prune_spill(live);
    return n;
  }
  void on_kv_move(std::function<void(const kv_move_event&)> fn) override {
    for (auto& e : r_) e->on_kv_move(fn);
  }
  bool healthy(std::string* why) const override {
    for (auto& e : r_)
      if (!e->healthy(why)) return false;
    return true;
  }

 private:
  // A request to its replica (pick()), counted in flight there until its on_done.
  template <class Request, class Callbacks>
  uint64_t route(Request request, Callbacks callbacks) {
    const int32_t r = pick(request.job_key);
    callbacks.on_done = [count = &in_flight_[r], done = std::move(callbacks.on_done)](auto res) {
      count->fetch_sub(1);
      if (done) done(std::move(res));
    };
    return global_id(r_[size_t(r)]->submit(std::move(request), std::move(callbacks)), r);
  }
  // Where a job_key's work goes: replica job_key % n, so a restarted process with as many replicas
  // finds a job's spill file in the directory of the replica its next turn runs on, and one key
  // never runs on two replicas at once. (Keys are hashes of job ids: many jobs spread evenly.) A
  // request without a key goes to the replica with the fewest requests in flight.
  // NOTE: not least-loaded for keyed jobs: a resumed job would then miss its spill file whenever
  // the other replica was less busy, and recompute its whole context.
  int32_t pick(uint64_t job_key) {
    std::lock_guard lock(mu_);
    int32_t r = 0;
    if (job_key != 0) {
      r = int32_t(job_key % uint64_t(n_));
      home_[job_key] = r;
    } else {
      r = int32_t(next_rr_++ % uint64_t(n_));
      for (int32_t i = 0; i < n_; ++i)
        if (in_flight_[i].load() < in_flight_[r].load()) r = i;
    }
    in_flight_[r].fetch_add(1);
    return r;
  }
  // The replicas to tell about job_key: the one it ran on, or every one when it has not run in this
  // process (a key from a previous one, whose files may be in another replica's directory after a
  // change of --engine-replicas). release forgets it.
  std::vector<int32_t> homes(uint64_t job_key, bool forget) {
    std::lock_guard lock(mu_);
    auto it = home_.find(job_key);
    if (it == home_.end()) {
      std::vector<int32_t> all(size_t(n_), 0);
      for (int32_t i = 0; i < n_; ++i) all[size_t(i)] = i;
      return all;
    }
    const int32_t r = it->second;
    if (forget) home_.erase(it);
    return {r};
  }
  // A replica's request ids interleaved: id * n + r (ids start at 1, so 0 stays "none").
  uint64_t global_id(uint64_t local_id, int32_t r) const { return local_id * uint64_t(n_) + uint64_t(r); }

  const int32_t n_;
  model_desc desc_;
  std::mutex mu_;
  std::unordered_map<uint64_t, int32_t> home_;  // job_key -> replica (see pick)
  uint64_t next_rr_ = 0;                        // key-less requests' tie-break
  // NOTE: before r_: the replicas' threads (stopped in r_'s destructors) run the callbacks that count down.
  std::unique_ptr<std::atomic<int32_t>[]> in_flight_;  // per replica: submitted, on_done not yet called
  std::vector<std::unique_ptr<engine>> r_;
};

}  // namespace

std::unique_ptr<engine> load_replica_set(const engine_config& config, int32_t n, std::string* error) {
  std::vector<std::unique_ptr<engine>> replicas;
  for (int32_t r = 0; r < n; ++r) {
    engine_config c = config;
    c.n_replicas = 1;
    c.kv_budget_bytes = config.kv_budget_bytes / uint64_t(n);
    c.draft_kv_budget_bytes = config.draft_kv_budget_bytes / uint64_t(n);
    c.spill_budget_bytes = config.spill_budget_bytes / n;
    // NOTE: a directory each: a spill store indexes every file of its directory at start-up, and two
    // indexes of one directory would restore (and delete) each other's files. Replica 0 keeps the
    // plain directory, so a one-replica run's files stay where a later one-replica run finds them.
    if (r > 0 && !config.spill_dir.empty()) c.spill_dir = config.spill_dir + "/replica-" + std::to_string(r);
    auto e = engine::load(c, error);
    if (!e) return nullptr;
    replicas.push_back(std::move(e));
  }
  return std::make_unique<replica_set>(std::move(replicas));
}

}  // namespace agentq
