// Batch lines into their model's batch stream through a window, round-robin between tenants (see
// batch_feeder.h).
#include "api/batch_feeder.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "queue/queue.h"
#include "store/batch_store.h"
#include "store/store.h"
#include <agentq/thread_class.h>

namespace agentq::api {

batch_feeder::batch_feeder(batch_feeder_options options, batch_feeder_deps deps)
    : options_(std::move(options)), deps_(deps) {}

batch_feeder::~batch_feeder() { stop(); }

void batch_feeder::start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] {
    util::name_thread("aq-batch-feed");  // per-thread profiles name it
    auto next_reconcile = std::chrono::steady_clock::now() + options_.reconcile_interval;
    while (running_) {
      int32_t n = 0;
      try {
        n = feed_once();
        if (std::chrono::steady_clock::now() >= next_reconcile) {
          reconcile_once();
          next_reconcile = std::chrono::steady_clock::now() + options_.reconcile_interval;
        }
      } catch (const std::exception& e) {
        spdlog::error("batch feeder: pass failed: {}", e.what());
      }
      if (n > 0) continue;  // more may fit at once (a window refilled by acks meanwhile)
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, n < 0 ? options_.busy_poll : options_.idle_poll, [&] { return woken_ || !running_; });
      woken_ = false;
    }
  });
}

void batch_feeder::stop() {
  if (!running_.exchange(false)) return;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  save_cursors();
}

void batch_feeder::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

// Read lines ahead from `fetched` until a window's worth of jobs waits in `ahead`, each with its stream.
void batch_feeder::refill(const std::string& batch_id, feed& f, int64_t n_accepted) {
  auto n_jobs = [&] {
    return std::count_if(f.ahead.begin(), f.ahead.end(), [](const line& l) { return !l.job_id.empty(); });
  };
  if (f.fetched >= n_accepted || n_jobs() >= options_.window / 2) return;
  auto& q = *deps_.q;
  const int batch_idx = static_cast<int>(store::job_priority::batch);
  // NOTE: bounded in lines too, so a long run of refused lines is skipped over several passes.
  while (f.fetched < n_accepted && n_jobs() < options_.window && int64_t(f.ahead.size()) < 4 * int64_t(options_.window)) {
    auto rows = deps_.batches->feed_lines(batch_id, f.fetched, options_.window);
    std::vector<std::string> ids;
    for (auto& [idx, job_id] : rows)
      if (!job_id.empty()) ids.push_back(job_id);
    // NOTE: routing (#28) as the relay does: the job's model's stream, else the legacy one.
    const auto models = q.options().route_by_model ? deps_.store->job_models(ids) : std::map<std::string, std::string>{};
    bool any = false;
    for (auto& [idx, job_id] : rows) {
      if (idx >= n_accepted) break;  // NOTE: rows past n_accepted belong to a chunk being committed
      line l{idx, job_id, {}, {}};
      if (!job_id.empty()) {
        if (auto m = models.find(job_id); m != models.end()) l.model = m->second;
        l.stream = l.model.empty() ? q.stream_key(batch_idx) : q.model_stream_key(l.model, batch_idx);
      }
      f.ahead.push_back(std::move(l));
      f.fetched = idx + 1;
      any = true;
    }
    if (!any) break;
  }
}

int32_t batch_feeder::feed_once() {
  ++n_passes_;
  auto open = deps_.batches->list_open();
  for (auto& [_, f] : feeds_) f.open = false;
  // tenant -> its batches with lines to hand out, oldest first (list_open is in creation order)
  std::map<std::string, std::vector<std::pair<const std::string*, feed*>>> by_tenant;
  std::vector<std::string> tenants;  // in order of their oldest open batch
  for (const auto& b : open) {
    if (b.status != store::batch_status::validating && b.status != store::batch_status::in_progress) continue;
    auto [it, fresh] = feeds_.try_emplace(b.id);
    feed& f = it->second;
    f.open = true;
    if (fresh) {
      f.tenant = b.tenant;
      f.seq = b.seq;
      f.next = f.fetched = deps_.batches->feed_cursor(b.id);
      f.saved = f.next;
    }
    refill(b.id, f, b.n_accepted);
    if (f.ahead.empty()) continue;
    if (!by_tenant.count(b.tenant)) tenants.push_back(b.tenant);
    by_tenant[b.tenant].emplace_back(&it->first, &f);
  }
  for (auto it = feeds_.begin(); it != feeds_.end();)  // ended, cancelling or gone: forget
    it = it->second.open ? std::next(it) : feeds_.erase(it);
  if (tenants.empty()) {
    save_cursors();
    return 0;
  }
  // NOTE: the deal starts at a different tenant each pass, so one free place a pass still alternates.
  std::rotate(tenants.begin(), tenants.begin() + int64_t(n_passes_ % tenants.size()), tenants.end());

  // Deal the free places one line per tenant per round. taken[feed] = lines of its `ahead` dealt.
  std::map<std::string, int64_t> room;  // stream -> free places
  std::map<feed*, size_t> taken;
  std::vector<queue::queue::publish_item> items;
  std::vector<feed*> item_feed;
  bool waiting = false, progress = true;
  const int batch_idx = static_cast<int>(store::job_priority::batch);
  while (progress) {
    progress = false;
    for (const auto& t : tenants) {
      for (auto& [id, f] : by_tenant[t]) {
        size_t& k = taken[f];
        while (k < f->ahead.size() && f->ahead[k].job_id.empty()) ++k;  // refused lines: nothing to send
        if (k >= f->ahead.size()) continue;  // this batch is dealt out: the tenant's next batch
        const line& l = f->ahead[k];
        auto r = room.find(l.stream);
        if (r == room.end()) {
          auto len = deps_.q->stream_length(l.stream);
          if (!len) return 0;  // Redis unreachable: next pass
          r = room.emplace(l.stream, options_.window - *len).first;
        }
        if (r->second <= 0) {
          waiting = true;  // FIFO within a tenant: its later lines wait behind this one
          break;
        }
        --r->second;
        items.push_back({l.job_id, batch_idx, {}, l.model});
        item_feed.push_back(f);
        ++k;
        progress = true;
        break;  // one line per tenant per round
      }
    }
  }
  auto ok = deps_.q->publish_many(items);
  // Each feed moves past the prefix of its dealt lines that went out (refused ones with them); a line
  // that failed stays at the front for the next pass (lines dealt after it may go twice: harmless, a
  // duplicate entry's claim fails and the worker acks it).
  std::set<feed*> stopped;
  int32_t n = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    feed* f = item_feed[j];
    if (stopped.count(f)) continue;
    if (!ok[j]) {
      stopped.insert(f);
      continue;
    }
    while (!f->ahead.empty() && f->ahead.front().job_id != items[j].job_id) f->ahead.pop_front();  // refused
    if (!f->ahead.empty()) f->ahead.pop_front();
    ++n;
  }
  for (auto& [f, k] : taken) {
    if (!stopped.count(f))
      while (!f->ahead.empty() && f->ahead.front().job_id.empty()) f->ahead.pop_front();  // refused, dealt
    f->next = f->ahead.empty() ? f->fetched : f->ahead.front().line_idx;
  }
  n_published_ += n;
  if (std::chrono::steady_clock::now() - saved_at_ >= options_.save_interval) save_cursors();
  return n > 0 ? n : (waiting ? -1 : 0);
}

void batch_feeder::save_cursors() {
  saved_at_ = std::chrono::steady_clock::now();
  for (auto& [id, f] : feeds_) {
    if (f.next == f.saved) continue;
    // NOTE: a cursor behind the truth after a crash only publishes some lines twice (harmless).
    if (deps_.batches->set_feed_cursor(id, f.next)) f.saved = f.next;
  }
}

int32_t batch_feeder::reconcile_once() {
  int32_t n = 0;
  const int64_t cutoff = deps_.batches->now() - options_.reconcile_grace_ms;
  const int batch_idx = static_cast<int>(store::job_priority::batch);
  for (auto& [id, f] : feeds_) {
    if (f.next == 0) continue;
    auto rows = deps_.batches->queued_lines(id, 0, f.next, cutoff, 1000);
    if (rows.empty()) continue;
    std::vector<std::string> ids;
    for (auto& r : rows) ids.push_back(r.second);
    auto held = deps_.q->in_flight(ids);
    if (!held) return n;  // Redis unreachable: next time
    std::vector<std::string> lost;
    for (size_t i = 0; i < ids.size(); ++i)
      if (!(*held)[i]) lost.push_back(ids[i]);
    if (lost.empty()) continue;
    const auto models =
        deps_.q->options().route_by_model ? deps_.store->job_models(lost) : std::map<std::string, std::string>{};
    std::vector<queue::queue::publish_item> items;
    for (auto& job_id : lost) {
      auto m = models.find(job_id);
      items.push_back({job_id, batch_idx, {}, m != models.end() ? m->second : std::string()});
    }
    auto ok = deps_.q->publish_many(items);
    for (bool b : ok) n += b ? 1 : 0;
    spdlog::info("batch feeder: batch {}: {} published jobs missing from Redis published again", id, n);
  }
  n_republished_ += n;
  return n;
}

}  // namespace agentq::api
