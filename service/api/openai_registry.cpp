// Deleted responses and webhook endpoints on the job store's file (see openai_registry.h).
#include "api/openai_registry.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "store/sqlite.h"
#include "store/store.h"
#include "util/crypto.h"

namespace agentq::api {

using json = nlohmann::json;

bool is_response_webhook_event(const std::string& name) {
  return name == "response.completed" || name == "response.failed" || name == "response.cancelled" ||
         name == "response.incomplete" || name == "batch.completed" || name == "batch.failed" ||
         name == "batch.cancelled" || name == "batch.expired";
}

openai_registry::openai_registry(std::unique_ptr<store::sqlite_db> db) : db_(std::move(db)) {}
openai_registry::~openai_registry() = default;

std::unique_ptr<openai_registry> openai_registry::open(const std::string& db_path, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    // NOTE: the tables come from migrations/0007_openai.sql (the store, opened first, ran it).
    return std::unique_ptr<openai_registry>(new openai_registry(std::move(db)));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening the OpenAI registry: ") + e.what();
    return nullptr;
  }
}

bool openai_registry::is_deleted(const std::string& job_id) {
  std::lock_guard lock(mu_);
  try {
    auto s = db_->prepare("SELECT 1 FROM openai_deleted_responses WHERE job_id=?");
    s.bind(1, job_id);
    return s.step();
  } catch (const std::exception& e) {
    spdlog::error("openai: is_deleted {}: {}", job_id, e.what());
    return false;
  }
}

std::optional<webhook_endpoint> openai_registry::add_endpoint(const std::string& tenant, const std::string& url,
                                                              std::vector<std::string> events) {
  std::lock_guard lock(mu_);
  webhook_endpoint e{"we_" + crypto::random_token(16), tenant, url, std::move(events), store::now_ms()};
  try {
    db_->prepare("INSERT INTO openai_webhook_endpoints(id, tenant, url, events_json, created_ms) VALUES (?,?,?,?,?)")
        .bind_all(e.id, e.tenant, e.url, json(e.events).dump(), e.created_ms)
        .run();
    return e;
  } catch (const std::exception& ex) {
    spdlog::error("openai: add_endpoint: {}", ex.what());
    return std::nullopt;
  }
}

std::vector<webhook_endpoint> openai_registry::list_endpoints(const std::string& tenant) {
  std::lock_guard lock(mu_);
  std::vector<webhook_endpoint> out;
  try {
    auto s = db_->prepare(
        "SELECT id, tenant, url, events_json, created_ms FROM openai_webhook_endpoints "
        "WHERE (?1 = '' OR tenant = ?1) ORDER BY created_ms, id");
    s.bind(1, tenant);
    while (s.step()) {
      webhook_endpoint e{s.col_text(0), s.col_text(1), s.col_text(2), {}, s.col_int(4)};
      json ev = json::parse(s.col_text(3), nullptr, false);
      if (ev.is_array())
        for (const auto& x : ev)
          if (x.is_string()) e.events.push_back(x.get<std::string>());
      out.push_back(std::move(e));
    }
  } catch (const std::exception& ex) {
    spdlog::error("openai: list_endpoints: {}", ex.what());
  }
  return out;
}

std::optional<webhook_endpoint> openai_registry::get_endpoint(const std::string& id, const std::string& tenant) {
  for (auto& e : list_endpoints(tenant))
    if (e.id == id) return e;
  return std::nullopt;
}

bool openai_registry::remove_endpoint(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  try {
    db_->prepare("DELETE FROM openai_webhook_endpoints WHERE id=? AND tenant=?").bind_all(id, tenant).run();
    return db_->changes() > 0;
  } catch (const std::exception& ex) {
    spdlog::error("openai: remove_endpoint: {}", ex.what());
    return false;
  }
}

}  // namespace agentq::api
