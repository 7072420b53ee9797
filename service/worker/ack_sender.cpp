// One thread sending the job threads' acks (ack_sender.h): it takes everything queued (up to
// max_batch) and sends it as one pipeline, so acks posted during a round trip share the next one.
#include "worker/ack_sender.h"
#include <agentq/thread_class.h>

#include <algorithm>
#include <utility>

namespace agentq::worker {

ack_sender::ack_sender(std::function<void(const std::vector<queue::delivery>&)> ack, int32_t max_batch)
    : ack_(std::move(ack)), max_batch_(std::max(1, max_batch)) {
  thread_ = std::thread([this] {
    util::name_thread("aq-job-acks", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
    loop();
  });
}

ack_sender::~ack_sender() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ack_sender::post(const queue::delivery& d) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(d);
    n_posted_++;
    // NOTE: a busy thread looks at the queue again after its round trip; waking it is a futex call
    // for nothing, so only an idle thread is woken, once.
    wake = idle_;
    idle_ = false;
  }
  if (wake) cv_.notify_one();
}

void ack_sender::flush() {
  std::unique_lock lock(mu_);
  const int64_t target = n_posted_;
  sent_cv_.wait(lock, [&] { return n_sent_ >= target; });
}

ack_sender_stats ack_sender::stats() const {
  std::lock_guard lock(mu_);
  return {n_sent_, n_batches_};
}

void ack_sender::loop() {
  std::vector<queue::delivery> batch;
  std::unique_lock lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      idle_ = true;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      idle_ = false;
      continue;
    }
    const size_t take = std::min(queue_.size(), static_cast<size_t>(max_batch_));
    batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + take));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
    lock.unlock();
    try {
      ack_(batch);
    } catch (...) {
      // NOTE: Redis unreachable: these entries stay pending and are reclaimed; their claims find the
      // jobs over and ack them. Nothing is lost by dropping the batch here.
    }
    lock.lock();
    n_sent_ += static_cast<int64_t>(take);
    n_batches_++;
    sent_cv_.notify_all();
  }
}

}  // namespace agentq::worker
