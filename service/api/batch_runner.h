// The Batch API's background work (docs/openai.md "Batch"): accepts a validating batch's lines as
// jobs in large transactions (resumable after a crash from the batch's n_accepted), keeps
// request_counts current, cancels and expires, and finalizes: output / error JSONL files and the
// batch.<status> webhook. One thread in the API process. While a batch runs, the lines whose jobs
// have ended (in line order) are written ahead into its output files, so finalizing has only the
// last few left (docs/queue_perf.md "Session 25 (branch `queue11c`)").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/validate.h"
#include "store/batch_store.h"

namespace agentq::store {
class store;
}
namespace agentq::net {
class ssrf_guard;
}

namespace agentq::api {

class model_catalog;
class batch_feeder;

struct batch_runner_options {
  std::string files_dir;                          // where files' bytes live (DATA_DIR/files)
  int32_t chunk_lines = 5000;                     // lines accepted per write transaction
  int32_t first_chunk_lines = 256;                // the first chunk's (its jobs start while the rest is mapped)
  size_t max_line_bytes = 4 << 20;
  std::chrono::milliseconds poll{200};            // idle pass interval
  std::chrono::milliseconds count_interval{1000}; // request_counts refresh per open batch
  // How often an in_progress batch's finished lines are written ahead into its output files (doubled
  // after a pass that found none, up to count_interval); 0 = every pass (tests).
  std::chrono::milliseconds render_interval{50};
  validation_limits limits;
};

struct batch_runner_deps {
  store::store* store = nullptr;
  store::batch_store* batches = nullptr;
  const model_catalog* catalog = nullptr;
  const net::ssrf_guard* guard = nullptr;
  batch_feeder* feeder = nullptr;  // woken after each committed chunk (its jobs go to Redis from there)
};

class batch_runner {
 public:
  batch_runner(batch_runner_options options, batch_runner_deps deps);
  ~batch_runner();  // stop()
  void start();
  void stop();
  void wake();      // a batch was created or cancelled: run a pass now
  // One pass over the open batches (the thread's body; tests).
  void run_once();

 private:
  void ingest(const store::batch_row& b);
  void watch(const store::batch_row& b, bool force_count);
  void cancel_open(const store::batch_row& b);
  void finalize(const store::batch_row& b, store::batch_status from, store::batch_status to, const std::string& why);
  void fail(const store::batch_row& b, const std::string& code, const std::string& message);
  // Write the batch's next lines whose output cannot change any more into its output files; true
  // when this pass wrote its last line (every job of the batch has ended).
  bool render_ready(const store::batch_row& b);

  batch_runner_options options_;
  batch_runner_deps deps_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  std::atomic<bool> running_{false};
  std::thread thread_;
  // When each open batch's request_counts are read next (runner thread only). NOTE: paced by the
  // batch's own progress: the next read is due when the open jobs should be done at the rate seen
  // since the last read (at least 20 ms, at most count_interval), so a batch is finalized within
  // ~20 ms of its last job rather than up to count_interval later, and a stalled one costs a read
  // per count_interval as before.
  struct count_clock {
    std::chrono::steady_clock::time_point next{}, at{};
    int64_t n_done = -1;  // completed + failed at `at`; -1 = not read yet
  };
  std::map<std::string, count_clock> count_clock_;
  // The output files of an in_progress batch written so far (render_ready; finalize goes on from
  // them). At most k_max_rendering batches at once (two open files each); others finalize whole.
  struct output_progress;
  std::map<std::string, std::unique_ptr<output_progress>> rendered_;
  // How long the thread may sleep before a batch's counts or next lines are due (at most options_.poll).
  std::chrono::milliseconds until_next_count() const;
};

}  // namespace agentq::api
