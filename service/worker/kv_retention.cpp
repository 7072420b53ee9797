// Retained KV keys of finished stored responses (see kv_retention.h).
#include "worker/kv_retention.h"

#include <nlohmann/json.hpp>

#include "util/fnv1a.h"

namespace agentq::worker {

uint64_t job_key_of(const std::string& id) {
  const uint64_t h = util::fnv1a64(id);
  return h ? h : 1;
}

std::string kv_chain_of(const std::string& request_json, const std::string& job_id) {
  // NOTE: no parse of the whole request when it cannot name one (issue 29: the parse was ~12 % of
  // the dispatcher's CPU per claim). Exact for what the API stores: nlohmann's dump, which writes
  // the key as these bytes (it never escapes '_').
  if (request_json.find("\"kv_chain\"") == std::string::npos) return job_id;
  auto j = nlohmann::json::parse(request_json, nullptr, false);
  if (j.is_object())
    if (auto it = j.find("kv_chain"); it != j.end() && it->is_string() && !it->get<std::string>().empty())
      return it->get<std::string>();
  return job_id;
}

void kv_retention::hold(uint64_t key, const std::string& job_id, clock::time_point until) {
  std::lock_guard lock(mu_);
  keys_[key] = entry{job_id, until};
}

void kv_retention::claim(uint64_t key) {
  std::lock_guard lock(mu_);
  keys_.erase(key);
}

std::vector<uint64_t> kv_retention::expired(clock::time_point now) {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (auto it = keys_.begin(); it != keys_.end();) {
    if (it->second.until <= now) {
      out.push_back(it->first);
      it = keys_.erase(it);
    } else
      ++it;
  }
  return out;
}

std::optional<uint64_t> kv_retention::drop_job(const std::string& job_id) {
  std::lock_guard lock(mu_);
  for (auto it = keys_.begin(); it != keys_.end(); ++it)
    if (it->second.job_id == job_id) {
      uint64_t k = it->first;
      keys_.erase(it);
      return k;
    }
  return std::nullopt;
}

bool kv_retention::held_by_other(uint64_t key, const std::string& job_id) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  return it != keys_.end() && it->second.job_id != job_id;
}

std::vector<std::pair<uint64_t, std::string>> kv_retention::held() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (auto& [k, e] : keys_) out.emplace_back(k, e.job_id);
  return out;
}

size_t kv_retention::size() {
  std::lock_guard lock(mu_);
  return keys_.size();
}

}  // namespace agentq::worker
