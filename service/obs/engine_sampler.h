// The worker's engine sampler: a thread that reads engine::stats() about every second while
// the engine is busy (every idle_interval otherwise), writes one engine sample (rates since the
// previous one) and the worker's metric families to SQLite, and prunes samples older than retain.
#pragma once

#include <agentq/engine.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace agentq::obs {

class sample_sink;

struct sampler_options {
  std::chrono::milliseconds busy_interval{1000};
  std::chrono::milliseconds idle_interval{10000};  // an idle worker still refreshes its metrics
  std::chrono::milliseconds retain{std::chrono::hours(1)};
};

class engine_sampler {
 public:
  engine_sampler(sample_sink& db, std::shared_ptr<engine> eng, std::string worker_id, sampler_options options = {});
  ~engine_sampler();  // stop()
  void start();
  void stop();  // writes a last sample
  // Take one sample; write it when the engine is busy, force, or idle_interval has passed. true if written.
  bool sample_once(bool force = false);

 private:
  sample_sink& db_;
  std::shared_ptr<engine> eng_;
  std::string worker_id_;
  sampler_options options_;
  engine_stats last_{};
  std::chrono::steady_clock::time_point last_at_{}, last_write_{}, last_prune_{};
  bool have_last_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace agentq::obs
