// Worker-side job metrics (see job_metrics.h).
#include "obs/job_metrics.h"

namespace agentq::obs {

namespace {

// Per-token latencies sit well below the 1 ms floor of the latency buckets.
const std::vector<double>& token_buckets() {
  static const std::vector<double> k = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                        0.025,  0.05,    0.1,    0.25,  0.5,    1};
  return k;
}

struct job_families {
  metrics::family_of<metrics::histogram>& queue_wait = worker_registry().histogram_family(
      "agentq_job_queue_wait_seconds", "Time from submission to the job's first claim by a worker.");
  metrics::family_of<metrics::histogram>& ttft = worker_registry().histogram_family(
      "agentq_turn_time_to_first_token_seconds", "Per model turn: engine queue plus prefill, until the first token.");
  metrics::family_of<metrics::histogram>& itl =
      worker_registry().histogram_family("agentq_turn_inter_token_latency_seconds",
                                         "Per model turn: mean time between generated tokens.", {}, token_buckets());
  metrics::family_of<metrics::histogram>& tool_wait = worker_registry().histogram_family(
      "agentq_tool_wait_seconds", "Server-side tool calls: time until the result, retries included.", {"outcome"});
  metrics::family_of<metrics::histogram>& job_latency = worker_registry().histogram_family(
      "agentq_job_duration_seconds", "Time from submission to a terminal state, by final status.", {"status"},
      {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600});
};

job_families& families() {
  static job_families f;
  return f;
}

}  // namespace

metrics::registry& worker_registry() {
  static metrics::registry r;
  return r;
}

void observe_claim(int64_t created_ms, int64_t started_ms, int64_t now_ms) {
  if (started_ms != now_ms) return;  // started earlier: a continuation or a re-claim
  families().queue_wait.with().observe(double(now_ms - created_ms) / 1000.0);
}

void observe_turn(const turn_usage& u) {
  families().ttft.with().observe((u.queue_ms + u.prefill_ms) / 1000.0);
  // NOTE: the mean over the turn (decode time / gaps); the engine reports no per-token times.
  if (u.n_tokens_generated > 1) families().itl.with().observe(u.decode_ms / 1000.0 / (u.n_tokens_generated - 1));
}

void observe_tool(double seconds, bool ok) {
  families().tool_wait.with({ok ? "ok" : "error"}).observe(seconds);
}

void observe_finish(int64_t created_ms, int64_t now_ms, const std::string& status) {
  families().job_latency.with({status}).observe(double(now_ms - created_ms) / 1000.0);
}

}  // namespace agentq::obs
