// Group commit of batch-class job ends: one thread collects the ends that arrive within `linger` of
// the first (or until the group is full, or every running job is waiting here), writes them in one
// transaction, acks the written ones in one pipeline, then answers each job thread.
#include "worker/end_batcher.h"
#include <agentq/thread_class.h>

#include <pthread.h>

#include <future>
#include <memory>
#include <utility>

namespace agentq::worker {

end_batcher::end_batcher(end_batcher_options options, end_batcher_deps deps)
    : options_(options), deps_(std::move(deps)) {
  if (options_.max_group < 1) options_.max_group = 1;
  thread_ = std::thread([this] {
    util::name_thread("aq-job-ends", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
    loop();
  });
}

end_batcher::~end_batcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

store::write_status end_batcher::commit_end(store::step_item item, const queue::delivery& delivery,
                                            std::string fault_subject) {
  auto p = std::make_shared<std::promise<store::write_status>>();
  auto fut = p->get_future();
  commit_end_async(std::move(item), delivery, std::move(fault_subject),
                   [p](store::write_status ws) { p->set_value(ws); });
  return fut.get();
}

void end_batcher::commit_end_async(store::step_item item, const queue::delivery& delivery, std::string fault_subject,
                                   std::function<void(store::write_status)> done) {
  // Counted before queueing (this job included: it has not ended): the arrival that completes the
  // group sees it complete.
  const int32_t n_running = deps_.n_running ? deps_.n_running() : options_.max_group;
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) first_at_ = std::chrono::steady_clock::now();
    queue_.push_back(pending{std::move(item), delivery, std::move(fault_subject), std::move(done)});
    // NOTE: the thread sleeps until the linger deadline; it is woken early only when the group may
    // be complete (full, or every running job's end is here), not once per arrival (a futex each).
    const auto n = static_cast<int32_t>(queue_.size());
    wake = n == 1 || n >= options_.max_group || n >= n_running;
  }
  if (wake) cv_.notify_one();
}

end_batcher_stats end_batcher::stats() const {
  std::lock_guard lock(mu_);
  return {n_groups_, n_ends_};
}

void end_batcher::loop() {
  std::vector<pending> group;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const auto deadline = first_at_ + options_.linger;
    for (;;) {
      const auto n = static_cast<int32_t>(queue_.size());
      if (stopping_ || n >= options_.max_group) break;
      if (deps_.n_running) {
        lock.unlock();
        const int32_t running = deps_.n_running();
        lock.lock();
        if (static_cast<int32_t>(queue_.size()) >= running) break;
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
    const size_t take = std::min(queue_.size(), static_cast<size_t>(options_.max_group));
    group.clear();
    for (size_t i = 0; i < take; ++i) group.push_back(std::move(queue_[i]));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
    if (!queue_.empty()) first_at_ = std::chrono::steady_clock::now();
    n_groups_++;
    n_ends_ += static_cast<int64_t>(take);
    lock.unlock();
    flush(group);
    lock.lock();
  }
}

void end_batcher::flush(std::vector<pending>& group) {
  std::vector<store::step_item> items;
  items.reserve(group.size());
  for (auto& p : group) items.push_back(std::move(p.item));
  std::vector<store::write_status> ws;
  try {
    ws = deps_.commit(std::move(items));
  } catch (...) {
    // NOTE: a link_error (remote control plane unreachable) or the like: every job of the group
    // answers error; its thread treats the job as lost here (not acked; the lease lapses).
  }
  ws.resize(group.size(), store::write_status::error);
  std::vector<queue::delivery> to_ack;
  for (size_t i = 0; i < group.size(); ++i)
    if (ws[i] == store::write_status::ok) {
      if (deps_.before_ack) deps_.before_ack(group[i].fault_subject);
      to_ack.push_back(group[i].delivery);
    }
  if (!to_ack.empty() && deps_.ack) deps_.ack(to_ack);
  for (size_t i = 0; i < group.size(); ++i) group[i].done(ws[i]);
}

}  // namespace agentq::worker
