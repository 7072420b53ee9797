// The remote worker's link to the control plane (remote_control_plane.h).
#include "worker/remote_control_plane.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "net/http_client.h"
#include "obs/obs_store.h"
#include "worker/protocol.h"

namespace agentq::worker {

using json = nlohmann::json;
namespace proto = protocol;
using store::write_status;

namespace {

json error_reply(const std::string& why) { return {{"status", "error"}, {"result", json::object()}, {"error", why}}; }

write_status status_of(const json& r) {
  return proto::parse_write_status(r.value("status", "error")).value_or(write_status::error);
}

}  // namespace

remote_control_plane::remote_control_plane(remote_options options) : options_(std::move(options)) {
  while (!options_.url.empty() && options_.url.back() == '/') options_.url.pop_back();
  // NOTE: the control plane's address is the operator's (--remote), not a user's: no SSRF limits.
  std::string err;
  auto any = net::parse_cidr_list("0.0.0.0/0,::/0", &err);
  http_ = std::make_unique<net::http_client>(net::ssrf_guard(any ? *any : std::vector<net::cidr>{}));
  sender_ = std::thread([this] { sender_loop(); });
}

remote_control_plane::~remote_control_plane() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  for (auto& p : queue_) p->reply.set_value(error_reply("the worker is stopping"));
}

std::future<json> remote_control_plane::send(const std::string& kind, const std::string& job_id, int64_t epoch,
                                             json body, const std::string& worker_id) {
  auto p = std::make_unique<pending>();
  const int64_t seq = ++seq_;
  p->msg = {{"v", options_.version},
            {"msg_id", options_.worker_id + ":" + options_.incarnation + ":" + std::to_string(seq)},
            {"worker_id", worker_id.empty() ? options_.worker_id : worker_id},
            {"incarnation", options_.incarnation},
            {"job_id", job_id},
            {"epoch", epoch},
            {"kind", kind},
            {"body", std::move(body)}};
  auto fut = p->reply.get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      p->reply.set_value(error_reply("the worker is stopping"));
      return fut;
    }
    queue_.push_back(std::move(p));
    stats_.n_messages++;
  }
  cv_.notify_one();
  return fut;
}

json remote_control_plane::call(const std::string& kind, const std::string& job_id, int64_t epoch, json body,
                                const std::string& worker_id) {
  return send(kind, job_id, epoch, std::move(body), worker_id).get();
}

write_status remote_control_plane::write(const std::string& kind, const std::string& job_id, int64_t epoch, json body) {
  json r = call(kind, job_id, epoch, std::move(body));
  write_status st = status_of(r);
  if (st != write_status::ok)
    spdlog::debug("remote worker {}: {} of job {} (epoch {}): {} {}", options_.worker_id, kind, job_id, epoch,
                  store::to_string(st), r.value("error", ""));
  return st;
}

json remote_control_plane::read(const std::string& kind, const std::string& job_id, json body, int64_t epoch) {
  // NOTE: protocol 2's reads carried epoch 0 (the control plane takes it as "the current lease");
  // from 3 on a job's content is read under the claim's epoch (api/worker_protocol.cpp read fence).
  json r = call(kind, job_id, options_.version >= 3 ? epoch : 0, std::move(body));
  if (status_of(r) != write_status::ok && status_of(r) != write_status::not_found)
    throw link_error(kind + ": " + r.value("status", "error") + " " + r.value("error", ""));
  return r;
}

void remote_control_plane::sender_loop() {
  for (;;) {
    std::vector<std::unique_ptr<pending>> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // NOTE: the same batch (same msg_ids) is resent until answered: the control plane answers a
    // message it already applied with its recorded reply, so a lost reply costs no second apply.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_for_ms);
    int64_t backoff_ms = 50;
    for (int attempt = 0;; ++attempt) {
      std::string why;
      bool fatal = false;
      if (post(batch, &why, &fatal)) break;
      bool stopping;
      {
        std::lock_guard lock(mu_);
        stopping = stopping_;
        if (attempt > 0) stats_.n_retries++;
      }
      if (fatal || stopping || std::chrono::steady_clock::now() >= give_up) {
        if (!fatal) spdlog::warn("remote worker {}: control plane unreachable ({}); {} message(s) failed",
                                 options_.worker_id, why, batch.size());
        for (auto& p : batch) p->reply.set_value(error_reply(why));
        break;
      }
      if (attempt == 0) spdlog::info("remote worker {}: control plane: {}; retrying", options_.worker_id, why);
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 2000);
    }
  }
}

bool remote_control_plane::post(std::vector<std::unique_ptr<pending>>& batch, std::string* why, bool* fatal) {
  json msgs = json::array();
  for (auto& p : batch) msgs.push_back(p->msg);
  net::http_request req;
  req.url = options_.url + proto::k_path;
  req.body = json{{"messages", msgs}}.dump(-1, ' ', false, json::error_handler_t::replace);
  req.headers.push_back({"Content-Type", "application/json"});
  req.headers.push_back({"Authorization", "Bearer " + options_.token});
  req.timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  req.max_response_bytes = size_t(256) << 20;
  {
    std::lock_guard lock(mu_);
    stats_.n_requests++;
  }
  auto res = http_->send(req);
  if (!res.ok()) {
    *why = std::string(net::to_string(res.error)) + ": " + res.message;
    return false;
  }
  const int code = res.response.status;
  if (code == 401 || code == 403) {
    *fatal = true;
    *why = "the control plane refused the worker token (HTTP " + std::to_string(code) + ")";
    std::lock_guard lock(mu_);
    if (refused_.empty()) spdlog::error("remote worker {}: {}; claiming stops", options_.worker_id, *why);
    refused_ = *why;
    return false;
  }
  if (code != 200) {
    *why = "HTTP " + std::to_string(code) + " " + res.response.body.substr(0, 200);
    *fatal = code >= 400 && code < 500;  // a request it will never take
    return false;
  }
  json body = json::parse(res.response.body, nullptr, false);
  if (!body.is_object() || !body.contains("replies") || !body["replies"].is_array() ||
      body["replies"].size() != batch.size()) {
    *why = "malformed reply from the control plane";
    return false;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    json r = body["replies"][i];
    if (r.value("status", "") == "invalid" && r.contains("result") && r["result"].is_object() &&
        r["result"].value("reason", "") == "protocol") {
      std::lock_guard lock(mu_);
      if (refused_.empty()) spdlog::error("remote worker {}: {}; claiming stops", options_.worker_id, r.value("error", ""));
      refused_ = r.value("error", "protocol version refused");
    }
    batch[i]->reply.set_value(std::move(r));
  }
  return true;
}

std::string remote_control_plane::refused() const {
  std::lock_guard lock(mu_);
  return refused_;
}

remote_control_plane::link_stats remote_control_plane::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void remote_control_plane::forget_job(const std::string& job_id) {
  std::lock_guard lock(mu_);
  claimed_.erase(job_id);
}

// --- control_plane ------------------------------------------------------------------------

std::vector<std::string> remote_control_plane::fence_worker_leases(const std::string& worker_id) {
  json r = call("fence", "", 0, json::object(), worker_id);
  if (status_of(r) != write_status::ok) throw link_error("fence: " + r.value("error", r.value("status", "")));
  return r["result"].value("jobs", std::vector<std::string>{});
}

store::claim_result remote_control_plane::claim_job(const std::string& job_id, const std::string& worker_id,
                                                    int64_t lease_ms, int32_t max_attempts) {
  json r = call("claim", job_id, 0, {{"lease_ms", lease_ms}, {"max_attempts", max_attempts}}, worker_id);
  store::claim_result out;
  if (status_of(r) != write_status::ok) return out;  // error: the entry stays pending
  try {
    const json& res = r.at("result");
    out.outcome = proto::parse_claim_outcome(res.at("outcome").get<std::string>()).value_or(store::claim_outcome::error);
    if (out.outcome != store::claim_outcome::claimed) return out;
    store::lease l;
    l.job_id = job_id;
    l.epoch = res.at("epoch").get<int64_t>();
    l.job = proto::job_row_from_json(res.at("job"));
    claimed c;
    c.transcript.emplace();
    for (const auto& t : res.at("transcript")) c.transcript->push_back(proto::transcript_row_from_json(t));
    c.tool_results.emplace();
    for (const auto& t : res.at("tool_results")) c.tool_results->push_back(proto::tool_output_from_json(t));
    c.secret = res.value("secret", "");
    {
      std::lock_guard lock(mu_);
      claimed_[job_id] = std::move(c);
    }
    out.won = std::move(l);
  } catch (const std::exception& e) {
    spdlog::error("remote worker {}: malformed claim reply for {}: {}", options_.worker_id, job_id, e.what());
    out = {};
  }
  return out;
}

std::vector<std::string> remote_control_plane::renew_leases(std::vector<std::pair<std::string, int64_t>> jobs,
                                                            int64_t lease_ms) {
  json list = json::array();
  for (auto& [id, epoch] : jobs) list.push_back({id, epoch});
  json r = call("renew", "", 0, {{"jobs", list}, {"lease_ms", lease_ms}});
  if (status_of(r) != write_status::ok) return {};  // unreachable: the leases lapse by themselves
  return r["result"].value("lost", std::vector<std::string>{});
}

std::optional<store::job_row> remote_control_plane::get_job(const std::string& job_id) {
  json r = read("job", job_id, json::object());
  if (status_of(r) == write_status::not_found) return std::nullopt;
  return proto::job_row_from_json(r.at("result").at("job"));
}

std::map<std::string, std::string> remote_control_plane::job_models(const std::vector<std::string>& ids) {
  json r = read("job_models", "", {{"ids", ids}});
  return r.at("result").value("models", std::map<std::string, std::string>{});
}

std::vector<store::transcript_row> remote_control_plane::read_transcript(const std::string& job_id, int64_t epoch) {
  {
    std::lock_guard lock(mu_);
    auto it = claimed_.find(job_id);
    if (it != claimed_.end() && it->second.transcript) {
      auto rows = std::move(*it->second.transcript);
      it->second.transcript.reset();
      return rows;
    }
  }
  json r = read("transcript", job_id, json::object(), epoch);
  std::vector<store::transcript_row> rows;
  for (const auto& t : r.at("result").at("transcript")) rows.push_back(proto::transcript_row_from_json(t));
  return rows;
}

std::vector<store::tool_output> remote_control_plane::read_tool_results(const std::string& job_id, int64_t epoch) {
  {
    std::lock_guard lock(mu_);
    auto it = claimed_.find(job_id);
    if (it != claimed_.end() && it->second.tool_results) {
      auto rows = std::move(*it->second.tool_results);
      it->second.tool_results.reset();
      return rows;
    }
  }
  json r = read("tool_results", job_id, json::object(), epoch);
  std::vector<store::tool_output> out;
  for (const auto& t : r.at("result").at("tool_results")) out.push_back(proto::tool_output_from_json(t));
  return out;
}

std::vector<std::string> remote_control_plane::cancelled_among(const std::vector<std::string>& ids) {
  json r = call("cancelled_among", "", 0, {{"ids", ids}});
  if (status_of(r) != write_status::ok) return {};  // the next poll asks again
  return r["result"].value("ids", std::vector<std::string>{});
}

std::set<uint64_t> remote_control_plane::live_kv_keys() {
  json r = read("live_kv_keys", "", json::object());
  return r.at("result").at("keys").get<std::set<uint64_t>>();
}

std::string remote_control_plane::tool_secret(const std::string& job_id, const std::string&) {
  std::lock_guard lock(mu_);
  auto it = claimed_.find(job_id);
  return it == claimed_.end() ? std::string() : it->second.secret;
}

write_status remote_control_plane::init_transcript(const std::string& job_id, int64_t epoch,
                                                   std::vector<store::transcript_row> input) {
  json rows = json::array();
  for (const auto& r : input) rows.push_back(proto::to_json(r));
  write_status st = write("init_transcript", job_id, epoch, {{"rows", rows}});
  {
    // NOTE: the claim's (empty) transcript is stale now; the next read asks the control plane.
    std::lock_guard lock(mu_);
    if (auto it = claimed_.find(job_id); it != claimed_.end()) it->second.transcript.reset();
  }
  return st;
}

write_status remote_control_plane::commit_turn(const std::string& job_id, int64_t epoch, store::turn_commit turn) {
  return write("commit_turn", job_id, epoch, proto::to_json(turn));
}

write_status remote_control_plane::record_tool_result(const std::string& job_id, int64_t epoch, store::tool_output output,
                                                      std::string name) {
  return write("tool_result", job_id, epoch, {{"output", proto::to_json(output)}, {"name", name}});
}

write_status remote_control_plane::require_action(const std::string& job_id, int64_t epoch, std::string pending) {
  write_status st = write("require_action", job_id, epoch, {{"pending", pending}});
  if (st == write_status::ok) forget_job(job_id);
  return st;
}

write_status remote_control_plane::finish_job(const std::string& job_id, int64_t epoch, store::job_status status,
                                              std::string result_json, std::string error, store::usage_totals usage) {
  write_status st = write("finish", job_id, epoch,
                          {{"status", store::to_string(status)}, {"result", result_json}, {"error", error},
                           {"usage", usage.to_json()}});
  forget_job(job_id);
  return st;
}

write_status remote_control_plane::release_job(const std::string& job_id, int64_t epoch) {
  write_status st = write("release", job_id, epoch, json::object());
  forget_job(job_id);
  return st;
}

std::future<write_status> remote_control_plane::append_event(const std::string& job_id, int64_t epoch, std::string type,
                                                             std::string data_json) {
  auto fut = send("event", job_id, epoch, {{"type", type}, {"data", data_json}}).share();
  return std::async(std::launch::deferred, [fut] { return status_of(fut.get()); });
}

bool remote_control_plane::record(const std::string& job_id, int64_t epoch, const obs::timeline_entry& e) {
  return write("timeline", job_id, epoch, {{"entry", proto::to_json(e)}}) == write_status::ok;
}

bool remote_control_plane::close_open(const std::string& job_id, int64_t epoch, const std::string& kind, int64_t end_ms) {
  return write("timeline_close", job_id, epoch, {{"kind", kind}, {"end_ms", end_ms}}) == write_status::ok;
}

bool remote_control_plane::write_sample(const std::string& worker_id, const obs::engine_sample& s,
                                        const json& families) {
  json r = call("engine_sample", "", 0, {{"sample", obs::to_json(s)}, {"families", families}}, worker_id);
  return status_of(r) == write_status::ok;
}

}  // namespace agentq::worker
