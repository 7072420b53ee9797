// Per-tenant token quota: 429 insufficient_quota past --tenant-tokens-per-day (see tenant_quota.h).
#include "api/tenant_quota.h"

#include <spdlog/spdlog.h>

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
    : db_(std::move(db)), limits_(limits) {
  metrics::global()
      .gauge_family("agentq_quota_tokens_per_day", "The per-tenant token quota per UTC day (--tenant-tokens-per-day; 0 = none).")
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

void tenant_quota::refresh_locked(int64_t now_ms) {
  const int64_t day = now_ms / k_day_ms;
  auto now = std::chrono::steady_clock::now();
  if (day == day_ && now - read_at_ < limits_.refresh) return;
  try {
    // NOTE: the same sums as GET /v1/usage (finished jobs by finished_ms, tokens from usage_json),
    // so a tenant can see in its usage why it was refused. One pass over today's finished jobs
    // (the finished_ms index), at most once a second whatever the submit rate.
    auto s = db_->prepare(
        "SELECT tenant, SUM(COALESCE(json_extract(CASE WHEN json_valid(usage_json) THEN usage_json END, "
        "'$.prompt_tokens'), 0) + COALESCE(json_extract(CASE WHEN json_valid(usage_json) THEN usage_json END, "
        "'$.completion_tokens'), 0)) FROM jobs WHERE finished_ms >= ?1 GROUP BY tenant");
    s.bind_all(day * k_day_ms);
    std::unordered_map<std::string, int64_t> used;
    while (s.step()) used[s.col_text(0)] = s.col_int(1);
    used_ = std::move(used);
    day_ = day;
    read_at_ = now;
  } catch (const std::exception& e) {
    spdlog::warn("tenant quota: count failed: {}", e.what());  // keep the last counts
  }
}

int64_t tenant_quota::used_today(const std::string& tenant, int64_t now_ms) {
  std::lock_guard lock(mu_);
  refresh_locked(now_ms);
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
