// Engine sampler (see engine_sampler.h).
#include "obs/engine_sampler.h"

#include "metrics/exposition.h"
#include "obs/job_metrics.h"
#include "obs/obs_store.h"
#include "store/store.h"

namespace agentq::obs {

namespace {

// Mirror the engine's figures into the worker registry (gauges now, counters as totals).
void export_engine_stats(const engine_stats& s) {
  auto& r = worker_registry();
  auto& blocks = r.gauge_family("agentq_kv_blocks", "KV cache blocks by state.", {"state"});
  blocks.with({"used"}).set(double(s.n_blocks_used));
  blocks.with({"free"}).set(double(s.n_blocks_free));
  blocks.with({"cached"}).set(double(s.n_blocks_cached));
  blocks.with({"parked"}).set(double(s.n_blocks_parked));
  blocks.with({"spilled"}).set(double(s.n_blocks_spilled));
  r.gauge_family("agentq_kv_blocks_capacity", "KV cache blocks in the pool.").with().set(double(s.n_blocks_total));
  auto& seqs = r.gauge_family("agentq_engine_sequences", "Engine requests by scheduler state.", {"state"});
  seqs.with({"running"}).set(s.n_running);
  seqs.with({"waiting"}).set(s.n_waiting);
  r.gauge_family("agentq_engine_batch_tokens", "Tokens in the engine's latest step (batch size).")
      .with()
      .set(s.last_batch_tokens);
  r.gauge_family("agentq_prefix_cache_hit_ratio", "Prompt tokens served from cached KV / prompt tokens, since start.")
      .with()
      .set(s.n_tokens_prompt > 0 ? double(s.n_tokens_cached) / double(s.n_tokens_prompt) : 0);
  r.counter_family("agentq_prompt_tokens_computed_total", "Prompt tokens prefilled by the engine.")
      .with()
      .set(double(s.n_tokens_computed));
  r.counter_family("agentq_prompt_tokens_cached_total", "Prompt tokens served from cached KV.")
      .with()
      .set(double(s.n_tokens_cached));
  r.counter_family("agentq_generated_tokens_total", "Tokens sampled by the engine.")
      .with()
      .set(double(s.n_tokens_generated));
  auto& spec = r.counter_family("agentq_spec_tokens_total",
                                "Speculative decoding: proposed tokens the model accepted / rejected.", {"result"});
  spec.with({"accepted"}).set(double(s.n_tokens_draft_accepted));
  spec.with({"rejected"}).set(double(s.n_tokens_draft_rejected));
  r.counter_family("agentq_kv_evictions_total", "KV blocks evicted from the prefix cache.")
      .with()
      .set(double(s.n_evictions));
  r.counter_family("agentq_kv_spills_total", "KV spills to the disk tier.").with().set(double(s.n_spills));
  r.counter_family("agentq_kv_restores_total", "KV restores from the disk tier.").with().set(double(s.n_restores));
  r.counter_family("agentq_kv_early_spills_total", "Pinned requires_action waits also written to the disk tier.")
      .with()
      .set(double(s.n_early_spills));
  r.counter_family("agentq_kv_spill_corrupt_total", "Spill files that failed their checksum or size check (recomputed).")
      .with()
      .set(double(s.n_spill_corrupt));
  r.gauge_family("agentq_kv_spill_bytes", "Bytes of KV spill files on disk.").with().set(double(s.n_spill_bytes));
}

}  // namespace

engine_sampler::engine_sampler(sample_sink& db, std::shared_ptr<engine> eng, std::string worker_id,
                               sampler_options options)
    : db_(db), eng_(std::move(eng)), worker_id_(std::move(worker_id)), options_(options) {}

engine_sampler::~engine_sampler() {
  stop();
}

void engine_sampler::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      sample_once();
      lock.lock();
      cv_.wait_for(lock, options_.busy_interval, [this] { return stopping_; });
    }
  });
}

void engine_sampler::stop() {
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  sample_once(true);
}

bool engine_sampler::sample_once(bool force) {
  auto now = std::chrono::steady_clock::now();
  engine_stats s = eng_->stats();
  double dt = have_last_ ? std::chrono::duration<double>(now - last_at_).count() : 0;
  engine_sample out;
  out.at_ms = store::now_ms();
  if (dt > 0) {
    out.tokens_per_s = double(s.n_tokens_generated - last_.n_tokens_generated) / dt;
    out.prompt_tokens_per_s = double(s.n_tokens_computed - last_.n_tokens_computed) / dt;
  }
  out.batch_size = s.last_batch_tokens;
  out.running = s.n_running;
  out.waiting = s.n_waiting;
  out.kv_blocks_used = s.n_blocks_used;
  out.kv_blocks_total = s.n_blocks_total;
  out.kv_blocks_parked = s.n_blocks_parked;
  out.kv_blocks_spilled = s.n_blocks_spilled;
  out.prefix_hit_rate = s.n_tokens_prompt > 0 ? double(s.n_tokens_cached) / double(s.n_tokens_prompt) : 0;
  bool busy = s.n_running > 0 || s.n_waiting > 0 || !have_last_ || s.n_tokens_generated != last_.n_tokens_generated ||
              s.n_tokens_computed != last_.n_tokens_computed;
  last_ = s;
  last_at_ = now;
  have_last_ = true;
  if (!force && !busy && now - last_write_ < options_.idle_interval) return false;
  export_engine_stats(s);
  bool ok = db_.write_sample(worker_id_, out, metrics::to_json(worker_registry().collect()));
  last_write_ = now;
  if (now - last_prune_ > std::chrono::minutes(1)) {
    db_.prune(out.at_ms - std::chrono::duration_cast<std::chrono::milliseconds>(options_.retain).count());
    last_prune_ = now;
  }
  return ok;
}

}  // namespace agentq::obs
