// Per-tenant token quota: 429 insufficient_quota past --tenant-tokens-per-day (see tenant_quota.h).
#include "api/tenant_quota.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "metrics/registry.h"
#include "store/sqlite.h"

namespace agentq::api {

namespace {
constexpr int64_t k_day_ms = 86'400'000;
metrics::family_of<metrics::counter>& refused_counter() {
  static auto& c = metrics::global().counter_family(
      "agentq_quota_refused_total", "Submits refused with 429 insufficient_quota, by quota.", {"quota"});
  return c;
}
}  // namespace

tenant_quota::tenant_quota(std::unique_ptr<store::sqlite_db> db, quota_limits limits)
    : db_(std::move(db)), limits_(limits), interval_(limits.refresh) {
  metrics::global()
      .gauge_family("agentq_quota_tokens_per_day",
                    "The per-tenant token quota per UTC day (--tenant-tokens-per-day; 0 = none).")
      .with()
      .set(double(limits_.tokens_per_day));
}
tenant_quota::~tenant_quota() = default;

std::unique_ptr<tenant_quota> tenant_quota::open(const std::string& db_path, quota_limits limits, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    return std::unique_ptr<tenant_quota>(new tenant_quota(std::move(db), limits));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening the quota counter: ") + e.what();
    return nullptr;
  }
}

void tenant_quota::refresh_locked(std::unique_lock<std::mutex>& lock, int64_t now_ms) {
  const int64_t day = now_ms / k_day_ms;
  const auto start = std::chrono::steady_clock::now();
  if (counting_ || (day == day_ && start - read_at_ < interval_)) return;
  counting_ = true;
  lock.unlock();  // NOTE: submits go on with the last counts while this one runs
  std::unordered_map<std::string, int64_t> used;
  bool ok = true;
  try {
    // NOTE: the same sums as GET /v1/usage (finished jobs by finished_ms, tokens from usage_json),
    // so a tenant can see in its usage why it was refused. A job that finished today was updated
    // today: the status index's (status, updated_ms) ranges reach exactly today's terminal jobs
    // (a deleted job keeps its status and usage, so deleting jobs does not give quota back).
    auto s = db_->prepare(
        "SELECT tenant, SUM(COALESCE(json_extract(CASE WHEN json_valid(usage_json) THEN usage_json END, "
        "'$.prompt_tokens'), 0) + COALESCE(json_extract(CASE WHEN json_valid(usage_json) THEN usage_json END, "
        "'$.completion_tokens'), 0)) FROM jobs WHERE status IN ('completed','failed','cancelled','incomplete') "
        "AND updated_ms >= ?1 AND finished_ms >= ?1 GROUP BY tenant");
    s.bind_all(day * k_day_ms);
    while (s.step()) used[s.col_text(0)] = s.col_int(1);
  } catch (const std::exception& e) {
    ok = false;
    spdlog::warn("tenant quota: count failed: {}", e.what());  // keep the last counts
  }
  const auto took = std::chrono::steady_clock::now() - start;
  lock.lock();
  counting_ = false;
  if (!ok) return;
  used_ = std::move(used);
  day_ = day;
  read_at_ = start;
  // NOTE: a count costs about its share of today's finished jobs; re-counting at most every 20x its
  // duration keeps this under ~5% of one core whatever the day's volume.
  interval_ = std::max(limits_.refresh, std::chrono::duration_cast<std::chrono::milliseconds>(took * 20));
}

int64_t tenant_quota::used_today(const std::string& tenant, int64_t now_ms) {
  std::unique_lock lock(mu_);
  refresh_locked(lock, now_ms);
  if (now_ms / k_day_ms != day_) return 0;  // a new UTC day whose first count is still running
  auto it = used_.find(tenant);
  return it == used_.end() ? 0 : it->second;
}

tenant_quota::verdict tenant_quota::admit(const std::string& tenant, int64_t now_ms) {
  verdict v;
  if (limits_.tokens_per_day <= 0) return v;
  const int64_t used = used_today(tenant, now_ms);
  if (used < limits_.tokens_per_day) return v;
  v.admitted = false;
  const int64_t next_day_ms = (now_ms / k_day_ms + 1) * k_day_ms;
  v.retry_after_s = int32_t(std::max<int64_t>(1, (next_day_ms - now_ms + 999) / 1000));
  v.message = "this tenant used " + std::to_string(used) + " tokens today (UTC), its quota is " +
              std::to_string(limits_.tokens_per_day) + " (--tenant-tokens-per-day); it resets at 00:00 UTC";
  refused_counter().with({"tokens_per_day"}).inc();
  return v;
}

}  // namespace agentq::api
