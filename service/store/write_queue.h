// The store writer's queue: write ops in two classes, and the rule that picks each transaction's
// group. A submit (`POST /v1/jobs`: its 202 waits for this commit) is of the latency class; the
// worker's claims and job ends, the relay's outbox completions and the sweepers are background.
// Header-only so the rule is tested alone (tests/unit/service/store_write_queue.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace agentq::store {

enum class op_class { latency, background };

// While submits arrive, a group of background ops alone waits a moment for one to share its commit.
// NOTE: on a disk whose flush is most of a commit (session 24: fdatasync p50 1.3-3.9 ms, flat from 8
// to 64 KiB, on the Zen 3 host) a background-only commit between two groups of submits costs the
// submits arriving during it a whole extra flush (they wait for it, then for their own), while its
// ops would have ridden a submit's commit for almost nothing: at 1,000 submits/s 28 % of the
// writer's transactions were background-only, most of one op (a claim, a job end, an outbox
// completion). So the background waits (it is throughput work: claims and ends a few ms later) and
// the submits' commits stay back to back.
struct linger_policy {
  int64_t linger_us = 0;          // how long a background-only group waits for a latency op; 0 = never
  int64_t recent_us = 20'000;     // ... and only while a latency op was taken this recently
  size_t n_background_max = 64;   // ... and fewer than this many background ops wait (else they commit now)
  size_t n_background_alone = 64; // ops a background-only group takes at most while submits arrive
};

template <class Op>
class write_queue {
 public:
  // n_background_shared: background ops a group takes at most while it holds a latency op.
  explicit write_queue(size_t n_background_shared = 16, linger_policy linger = {})
      : n_background_shared_(n_background_shared), linger_(linger) {}

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
  // now_us: a steady clock (the linger rule's memory of the last latency op; any origin).
  // With a linger policy, a background-only group taken while submits arrive (submits_recent) takes
  // at most n_background_alone ops, so a submit arriving during it waits for a bounded apply.
  void take(std::vector<Op>& out, size_t max_ops, int64_t now_us = 0) {
    if (max_ops == 0) max_ops = 1;
    size_t n = 0;
    while (n < max_ops && !latency_.empty()) {
      out.push_back(std::move(latency_.front()));
      latency_.pop_front();
      ++n;
    }
    if (n > 0) {
      has_latency_ = true;
      last_latency_us_ = now_us;
    }
    const size_t n_bg = n > 0                       ? std::min(max_ops - n, n_background_shared_)
                        : submits_recent(now_us) ? std::min(max_ops, linger_.n_background_alone)
                                                 : max_ops;
    for (size_t i = 0; i < n_bg && !background_.empty(); ++i) {
      out.push_back(std::move(background_.front()));
      background_.pop_front();
    }
  }

  // Whether the writer should wait (until linger_deadline) before taking a background-only group:
  // only background ops queued, fewer than n_background_max, and a latency op taken recently.
  bool should_linger(int64_t now_us) const {
    return linger_.linger_us > 0 && latency_.empty() && !background_.empty() &&
           background_.size() < linger_.n_background_max && submits_recent(now_us);
  }
  int64_t linger_deadline(int64_t now_us) const { return now_us + linger_.linger_us; }
  const linger_policy& linger() const { return linger_; }

 private:
  bool submits_recent(int64_t now_us) const {
    return linger_.linger_us > 0 && has_latency_ && now_us - last_latency_us_ <= linger_.recent_us;
  }

  size_t n_background_shared_;
  linger_policy linger_;
  std::deque<Op> latency_, background_;
  bool has_latency_ = false;     // a latency op was ever taken
  int64_t last_latency_us_ = 0;  // when the last one was (take's now_us)
};

}  // namespace agentq::store
