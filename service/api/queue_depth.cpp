// Queue depth bounds: 429 queue_full past --max-queue-depth (see queue_depth.h).
#include "api/queue_depth.h"

#include <spdlog/spdlog.h>

#include "metrics/registry.h"
#include "store/sqlite.h"

namespace agentq::api {

namespace {
metrics::family_of<metrics::gauge>& depth_gauges() {
  static auto& g = metrics::global().gauge_family(
      "agentq_queue_depth_bound", "Queued jobs (depth) and their bound (--max-queue-depth; 0 = none), total and "
      "for the deepest tenant.", {"scope", "kind"});
  return g;
}
metrics::family_of<metrics::counter>& refused_counter() {
  static auto& c = metrics::global().counter_family(
      "agentq_queue_full_total", "Submits refused with 429 queue_full, by the bound that refused them.", {"scope"});
  return c;
}
}  // namespace

queue_depth::queue_depth(std::unique_ptr<store::sqlite_db> db, queue_bounds bounds)
    : db_(std::move(db)), bounds_(bounds) {
  depth_gauges().with({"total", "bound"}).set(double(bounds_.max_total));
  depth_gauges().with({"tenant", "bound"}).set(double(bounds_.max_per_tenant));
}
queue_depth::~queue_depth() = default;

std::unique_ptr<queue_depth> queue_depth::open(const std::string& db_path, queue_bounds bounds, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    return std::unique_ptr<queue_depth>(new queue_depth(std::move(db), bounds));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening the queue depth counter: ") + e.what();
    return nullptr;
  }
}

void queue_depth::refresh_locked() {
  auto now = std::chrono::steady_clock::now();
  if (now - read_at_ < bounds_.refresh) return;
  read_at_ = now;
  try {
    auto s = db_->prepare("SELECT tenant, COUNT(*) FROM jobs WHERE status='queued' GROUP BY tenant");
    int64_t total = 0, deepest = 0;
    by_tenant_.clear();
    while (s.step()) {
      int64_t n = s.col_int(1);
      by_tenant_[s.col_text(0)] = n;
      total += n;
      deepest = std::max(deepest, n);
    }
    total_ = total;
    depth_gauges().with({"total", "depth"}).set(double(total));
    depth_gauges().with({"tenant", "depth"}).set(double(deepest));
  } catch (const std::exception& e) {
    spdlog::warn("queue depth: count failed: {}", e.what());  // keep the last counts
  }
}

queue_depth::verdict queue_depth::admit(const std::string& tenant, int64_t n_new) {
  verdict v;
  if (bounds_.max_total <= 0 && bounds_.max_per_tenant <= 0) return v;
  std::lock_guard lock(mu_);
  refresh_locked();
  int64_t& mine = by_tenant_[tenant];
  // NOTE: Retry-After grows with how far past the bound the queue is (about 1 s per 1,000 jobs
  // over, 1-60 s): a client backs off longer the deeper the backlog.
  auto retry = [](int64_t over) { return int32_t(std::clamp<int64_t>(1 + over / 1000, 1, 60)); };
  if (bounds_.max_per_tenant > 0 && mine + n_new > bounds_.max_per_tenant) {
    v.admitted = false;
    v.message = "this tenant has " + std::to_string(mine) + " queued jobs; " + std::to_string(n_new) +
                " more would pass the bound of " + std::to_string(bounds_.max_per_tenant) +
                " (--max-queue-depth-per-tenant); retry later";
    v.retry_after_s = retry(mine + n_new - bounds_.max_per_tenant);
    refused_counter().with({"tenant"}).inc();
    return v;
  }
  if (bounds_.max_total > 0 && total_ + n_new > bounds_.max_total) {
    v.admitted = false;
    v.message = "the queue holds " + std::to_string(total_) + " jobs; " + std::to_string(n_new) +
                " more would pass the bound of " + std::to_string(bounds_.max_total) +
                " (--max-queue-depth); retry later";
    v.retry_after_s = retry(total_ + n_new - bounds_.max_total);
    refused_counter().with({"total"}).inc();
    return v;
  }
  mine += n_new;  // counted until the next re-read
  total_ += n_new;
  return v;
}

}  // namespace agentq::api
