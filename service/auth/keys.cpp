// API key store over SQLite (see keys.h).
#include "auth/keys.h"

#include <chrono>

#include "api/schema.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "util/crypto.h"
#include "webhooks/signing.h"

namespace agentq::auth {

namespace {
constexpr const char* k_cols =
    "id, tenant, key_prefix, is_admin, webhook_secret, created_ms, revoked_ms, COALESCE(retention_days, -1)";

key_info read_key(store::sqlite_stmt& s) {
  key_info k;
  k.id = s.col_text(0);
  k.tenant = s.col_text(1);
  k.prefix = s.col_text(2);
  k.is_admin = s.col_int(3) != 0;
  k.webhook_secret = s.col_text(4);
  k.created_ms = s.col_int(5);
  k.revoked_ms = s.col_int(6);
  k.retention_days = int32_t(s.col_int(7));
  return k;
}
}  // namespace

key_store::key_store(std::unique_ptr<store::sqlite_db> db) : db_(std::move(db)) {}
key_store::~key_store() = default;

std::unique_ptr<key_store> key_store::open(const std::string& db_path, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    if (!api::ensure_api_schema(*db, error)) return nullptr;
    return std::unique_ptr<key_store>(new key_store(std::move(db)));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening key store: ") + e.what();
    return nullptr;
  }
}

std::optional<new_key> key_store::create(const std::string& tenant, bool is_admin, std::string* error) {
  new_key out;
  out.key = "aq_" + crypto::random_token(30);
  out.info.id = "key_" + crypto::random_token(10);
  out.info.tenant = tenant;
  out.info.prefix = out.key.substr(0, 10);
  out.info.is_admin = is_admin;
  out.info.webhook_secret = webhooks::generate_secret();
  out.info.created_ms = store::now_ms();
  try {
    std::lock_guard lock(mu_);
    db_->prepare("INSERT INTO api_keys(id, tenant, key_hash, key_prefix, is_admin, webhook_secret, created_ms) "
                 "VALUES (?,?,?,?,?,?,?)")
        .bind_all(out.info.id, tenant, crypto::sha256_hex(out.key), out.info.prefix, int64_t(is_admin ? 1 : 0),
                  out.info.webhook_secret, out.info.created_ms)
        .run();
    return out;
  } catch (const std::exception& e) {
    if (error) *error = std::string("creating key: ") + e.what();
    return std::nullopt;
  }
}

std::optional<key_info> key_store::ensure(const std::string& bearer_key, const std::string& tenant,
                                          bool is_admin, std::string* error) {
  if (bearer_key.size() < 16) {
    if (error) *error = "the admin key must be at least 16 characters";
    return std::nullopt;
  }
  try {
    std::lock_guard lock(mu_);
    std::string hash = crypto::sha256_hex(bearer_key);
    auto s = db_->prepare(std::string("SELECT ") + k_cols + " FROM api_keys WHERE key_hash=?");
    s.bind(1, hash);
    if (s.step()) {
      key_info k = read_key(s);
      if (k.revoked_ms > 0) {
        if (error) *error = "that key was revoked";
        return std::nullopt;
      }
      return k;
    }
    key_info k;
    k.id = "key_" + crypto::random_token(10);
    k.tenant = tenant;
    k.prefix = bearer_key.substr(0, std::min<size_t>(10, bearer_key.size() / 2));
    k.is_admin = is_admin;
    k.webhook_secret = webhooks::generate_secret();
    k.created_ms = store::now_ms();
    db_->prepare("INSERT INTO api_keys(id, tenant, key_hash, key_prefix, is_admin, webhook_secret, created_ms) "
                 "VALUES (?,?,?,?,?,?,?)")
        .bind_all(k.id, tenant, hash, k.prefix, int64_t(is_admin ? 1 : 0), k.webhook_secret, k.created_ms)
        .run();
    return k;
  } catch (const std::exception& e) {
    if (error) *error = std::string("storing key: ") + e.what();
    return std::nullopt;
  }
}

namespace {
int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// NOTE: a bound on the cache's size: past it the cache is emptied (only valid keys enter, so this
// takes that many live keys used within one k_auth_cache_ms).
constexpr size_t k_auth_cache_max = 4096;
}  // namespace

void key_store::clear_cache() {
  std::lock_guard lock(cache_mu_);
  cache_.clear();
}

std::optional<key_info> key_store::authenticate(const std::string& bearer_key) {
  if (bearer_key.size() < 8 || bearer_key.size() > 200) return std::nullopt;
  const std::string hash = crypto::sha256_hex(bearer_key);
  const int64_t now = steady_ms();
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(hash);
    if (it != cache_.end() && it->second.expires_ms > now) return it->second.info;
  }
  std::lock_guard lock(mu_);
  if (!auth_stmt_)
    auth_stmt_ = std::make_unique<store::sqlite_stmt>(
        db_->prepare(std::string("SELECT ") + k_cols + " FROM api_keys WHERE key_hash=? AND revoked_ms=0"));
  auto& s = *auth_stmt_;
  // NOTE: reset on every way out, so the connection keeps no read snapshot between requests.
  struct reset_after {
    store::sqlite_stmt& s;
    ~reset_after() { s.reset(); }
  } guard{s};
  s.bind(1, hash);
  if (!s.step()) return std::nullopt;
  key_info k = read_key(s);
  {
    // NOTE: under mu_ too, so a revoke() (which clears under mu_) cannot be overtaken by this insert
    // of the key as read before the revoke.
    std::lock_guard cache_lock(cache_mu_);
    if (cache_.size() >= k_auth_cache_max) cache_.clear();
    cache_[hash] = {k, now + k_auth_cache_ms};
  }
  return k;
}

std::optional<key_info> key_store::get(const std::string& key_id) {
  std::lock_guard lock(mu_);
  auto s = db_->prepare(std::string("SELECT ") + k_cols + " FROM api_keys WHERE id=?");
  s.bind(1, key_id);
  if (!s.step()) return std::nullopt;
  return read_key(s);
}

std::vector<key_info> key_store::list(const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto s = db_->prepare(std::string("SELECT ") + k_cols + " FROM api_keys WHERE ?='' OR tenant=? ORDER BY created_ms");
  s.bind_all(tenant, tenant);
  std::vector<key_info> out;
  while (s.step()) out.push_back(read_key(s));
  return out;
}

bool key_store::revoke(const std::string& key_id) {
  std::lock_guard lock(mu_);
  db_->prepare("UPDATE api_keys SET revoked_ms=? WHERE id=? AND revoked_ms=0").bind_all(store::now_ms(), key_id).run();
  clear_cache();  // NOTE: a revocation takes effect at once in this process
  return db_->changes() > 0;
}

std::optional<std::string> key_store::rotate_secret(const std::string& key_id) {
  std::string secret = webhooks::generate_secret();
  std::lock_guard lock(mu_);
  db_->prepare("UPDATE api_keys SET webhook_secret=? WHERE id=? AND revoked_ms=0").bind_all(secret, key_id).run();
  clear_cache();
  if (db_->changes() == 0) return std::nullopt;
  return secret;
}

bool key_store::set_retention_days(const std::string& key_id, int32_t days) {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("UPDATE api_keys SET retention_days=? WHERE id=?");
  if (days < 0)
    s.bind_null(1);
  else
    s.bind(1, days);
  s.bind(2, key_id).run();
  clear_cache();
  return db_->changes() > 0;
}

int64_t key_store::count_active() {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT count(*) FROM api_keys WHERE revoked_ms=0");
  s.step();
  return s.col_int(0);
}

void key_store::link_job(const std::string& job_id, const std::string& key_id) {
  std::lock_guard lock(mu_);
  db_->prepare("INSERT OR IGNORE INTO job_keys(job_id, key_id) VALUES (?,?)").bind_all(job_id, key_id).run();
}

std::string key_store::webhook_secret_for(const std::string& job_id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto s = db_->prepare(
      "SELECT k.webhook_secret FROM job_keys j JOIN api_keys k ON k.id=j.key_id WHERE j.job_id=? AND k.revoked_ms=0");
  s.bind(1, job_id);
  if (s.step()) return s.col_text(0);
  auto t = db_->prepare("SELECT webhook_secret FROM api_keys WHERE tenant=? AND revoked_ms=0 ORDER BY created_ms DESC LIMIT 1");
  t.bind(1, tenant);
  return t.step() ? t.col_text(0) : std::string();
}

}  // namespace agentq::auth
