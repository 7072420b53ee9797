// API keys: random bearer keys (shown once, stored as SHA-256), tenants, admin flag,
// revocation, and a per-key "whsec_" webhook signing secret (rotatable).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace agentq::store {
class sqlite_db;
class sqlite_stmt;
}

namespace agentq::auth {

struct key_info {
  std::string id;              // "key_..."
  std::string tenant;
  std::string prefix;          // first characters of the key, for listings
  bool is_admin = false;
  std::string webhook_secret;  // whsec_...
  int64_t created_ms = 0;
  int64_t revoked_ms = 0;      // 0 = active
  int32_t retention_days = -1; // jobs it submits are kept this long after they finish; -1 = the server's
};

// A freshly created key: the only time the bearer key itself is available.
struct new_key {
  key_info info;
  std::string key;             // "aq_..."
};

class key_store {
 public:
  // Open the SQLite file (the job store's) with its own connection; creates the API tables
  // if needed. nullptr with *error on failure.
  static std::unique_ptr<key_store> open(const std::string& db_path, std::string* error);
  ~key_store();

  std::optional<new_key> create(const std::string& tenant, bool is_admin, std::string* error);
  // Make sure a key with exactly this value exists (operator-supplied --admin-key); the
  // existing or new key's info, nullopt with *error on failure (or if it was revoked).
  std::optional<key_info> ensure(const std::string& bearer_key, const std::string& tenant, bool is_admin,
                                 std::string* error);
  // The active key matching this bearer key; nullopt for unknown or revoked keys.
  // NOTE: a found key is remembered for k_auth_cache_ms (a SQLite read per request otherwise). A
  // change made through this key_store (revoke, rotate_secret, set_retention_days) clears the cache
  // at once; one made by another process (another agentqd on the same file) is seen within that bound.
  std::optional<key_info> authenticate(const std::string& bearer_key);
  static constexpr int64_t k_auth_cache_ms = 1000;
  std::optional<key_info> get(const std::string& key_id);
  // tenant empty = all tenants.
  std::vector<key_info> list(const std::string& tenant = {});
  bool revoke(const std::string& key_id);  // false if unknown or already revoked
  // New webhook secret for the key; nullopt if unknown.
  std::optional<std::string> rotate_secret(const std::string& key_id);
  // Override the retention of the jobs this key submits (days; -1 = back to the server's default).
  bool set_retention_days(const std::string& key_id, int32_t days);
  int64_t count_active();
  // Remember which key submitted a job (its webhook secret signs the job's webhooks).
  void link_job(const std::string& job_id, const std::string& key_id);
  // The webhook secret for a job's deliveries: its key's, else the tenant's newest active key's; "" if none.
  std::string webhook_secret_for(const std::string& job_id, const std::string& tenant);

 private:
  explicit key_store(std::unique_ptr<store::sqlite_db> db);
  std::mutex mu_;
  std::unique_ptr<store::sqlite_db> db_;
  std::unique_ptr<store::sqlite_stmt> auth_stmt_;  // authenticate's query, prepared once (every request runs it)
  struct cached_key {
    key_info info;
    int64_t expires_ms = 0;  // steady clock
  };
  std::mutex cache_mu_;  // NOTE: apart from mu_: a hit never waits for another request's SQLite read
  std::unordered_map<std::string, cached_key> cache_;  // by SHA-256 hex of the bearer key; found keys only
  void clear_cache();
};

}  // namespace agentq::auth
