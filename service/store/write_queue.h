// The store writer's queue: write ops in two classes, and the rule that picks each transaction's
// group. A submit (`POST /v1/jobs`: its 202 waits for this commit) is of the latency class; the
// worker's claims and job ends, the relay's outbox completions and the sweepers are background.
// Header-only so the rule is tested alone (tests/unit/service/store_write_queue.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <vector>

namespace agentq::store {

enum class op_class { latency, background };

template <class Op>
class write_queue {
 public:
  // n_background_shared: background ops a group takes at most while it holds a latency op.
  explicit write_queue(size_t n_background_shared = 16) : n_background_shared_(n_background_shared) {}

  void push(Op op, op_class cls) { (cls == op_class::latency ? latency_ : background_).push_back(std::move(op)); }
  bool empty() const { return latency_.empty() && background_.empty(); }
  size_t size() const { return latency_.size() + background_.size(); }
  size_t n_latency() const { return latency_.size(); }
  size_t n_background() const { return background_.size(); }

  // Move the next transaction's group (at most max_ops ops, at least one if any is queued) into out:
  // every latency op first, in arrival order; then background ops in arrival order, at most
  // n_background_shared of them when the group holds a latency op, else up to max_ops.
  // NOTE: the bound keeps a submit's commit small (its fsync writes fewer pages, its apply runs
  // fewer of the worker's statements) while the worker still gets n_background_shared ops into
  // every commit, so under a steady stream of submits it is slowed, never starved (unless max_ops
  // submits are queued at every take: then the writer cannot keep up with the submits alone).
  void take(std::vector<Op>& out, size_t max_ops) {
    if (max_ops == 0) max_ops = 1;
    size_t n = 0;
    while (n < max_ops && !latency_.empty()) {
      out.push_back(std::move(latency_.front()));
      latency_.pop_front();
      ++n;
    }
    const size_t n_bg = n > 0 ? std::min(max_ops - n, n_background_shared_) : max_ops;
    for (size_t i = 0; i < n_bg && !background_.empty(); ++i) {
      out.push_back(std::move(background_.front()));
      background_.pop_front();
    }
  }

 private:
  size_t n_background_shared_;
  std::deque<Op> latency_, background_;
};

}  // namespace agentq::store
