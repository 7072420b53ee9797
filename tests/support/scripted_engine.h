// A scripted stand-in for agentq::engine (tests of the agent loop without a model): each turn's
// result comes from a script function, on the engine's own thread, with optional delay; cancel,
// park, release and KV residency (cached prefix = the previous prompt of the same job) are modelled.
#pragma once

#include <agentq/engine.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace agentq::test {

class scripted_engine final : public engine {
 public:
  // script(request, n-th call for this job) -> the turn's result (usage is filled in here).
  using script_fn = std::function<turn_result(const turn_request&, int32_t call_idx)>;
  explicit scripted_engine(script_fn fn) : fn_(std::move(fn)) { desc_.name = "scripted"; }
  ~scripted_engine() override { stop(); }

  std::atomic<int32_t> turn_delay_ms{5};
  // Drops each turn's callbacks unanswered (an engine bug the worker must survive: no job may wait
  // forever for a turn).
  std::atomic<bool> drop_callbacks{false};

  const model_desc& model() const override { return desc_; }
  std::vector<token_id> tokenize(std::string_view text, bool, bool) const override {
    return std::vector<token_id>(text.size() / 4 + 1, 1);
  }
  std::string detokenize(std::span<const token_id>) const override { return {}; }
  std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>&) const override {
    std::string s;
    for (auto& m : messages) {
      s += m.content + "|";
      for (auto& c : m.tool_calls) s += c.id + c.name + c.arguments_json + "|";
    }
    return s;
  }
  std::optional<std::string> validate(const turn_request&) const override { return std::nullopt; }
  uint64_t submit(token_request, token_callbacks cb) override {
    token_result r;
    r.finish = finish_reason::error;
    r.error = "scripted engine: token requests unsupported";
    if (cb.on_done) cb.on_done(r);
    return 0;
  }
  uint64_t submit(turn_request request, turn_callbacks cb) override {
    std::lock_guard lock(mu_);
    uint64_t id = ++next_id_;
    pending_.push_back({id, std::move(request), std::move(cb)});
    cv_.notify_all();
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard lock(mu_);
    cancelled_.insert(id);
    n_cancels_++;
    cv_.notify_all();
  }
  void park(uint64_t job_key, double) override { n_parks_++; }
  void release(uint64_t job_key) override {
    std::lock_guard lock(mu_);
    resident_.erase(job_key);
    n_releases_++;
  }
  bool step() override { return false; }
  void start() override {
    if (running_.exchange(true)) return;
    thread_ = std::thread([this] { loop(); });
  }
  void stop() override {
    if (!running_.exchange(false)) return;
    cv_.notify_all();
    thread_.join();
  }
  engine_stats stats() const override { return {}; }
  // A device failure: healthy() turns false (the worker then hands jobs back and claims none).
  std::atomic<bool> failed{false};
  bool healthy(std::string* why) const override {
    if (failed && why) *why = "scripted device failure";
    return !failed;
  }

  // Observations for assertions.
  std::vector<turn_request> requests() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  int32_t n_cancels() const { return n_cancels_; }
  int32_t n_parks() const { return n_parks_; }
  int32_t n_releases() const { return n_releases_; }

 private:
  struct item {
    uint64_t id;
    turn_request req;
    turn_callbacks cb;
  };

  void loop() {
    std::unique_lock lock(mu_);
    while (running_) {
      cv_.wait(lock, [&] { return !running_ || !pending_.empty(); });
      if (!running_) break;
      item it = std::move(pending_.front());
      pending_.pop_front();
      seen_.push_back(it.req);
      if (drop_callbacks) {
        lock.unlock();
        it.cb = {};  // destroyed here, never called
        lock.lock();
        continue;
      }
      int32_t call_idx = calls_[it.req.job_key]++;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(turn_delay_ms.load());
      cv_.wait_until(lock, deadline, [&] { return !running_ || cancelled_.count(it.id) > 0; });
      turn_result r;
      if (cancelled_.count(it.id) || !running_) {
        r.finish = finish_reason::cancelled;
        resident_.erase(it.req.job_key);
      } else {
        lock.unlock();
        r = fn_(it.req, call_idx);
        lock.lock();
        int32_t n_prompt = static_cast<int32_t>(render(it.req.messages, it.req.tools).size());
        int32_t cached = 0;
        auto res = resident_.find(it.req.job_key);
        if (res != resident_.end()) cached = std::min(res->second, n_prompt);
        r.usage.n_tokens_prompt = n_prompt;
        r.usage.n_tokens_cached = cached;
        r.usage.n_tokens_computed = n_prompt - cached;
        r.usage.n_tokens_generated = static_cast<int32_t>(r.message.content.size()) + 1;
        resident_[it.req.job_key] = n_prompt;
        if (!r.message.tool_calls.empty() && r.finish == finish_reason::stop) r.finish = finish_reason::tool_calls;
      }
      lock.unlock();
      if (it.cb.on_done) it.cb.on_done(std::move(r));
      lock.lock();
    }
    for (auto& it : pending_) {
      turn_result r;
      r.finish = finish_reason::cancelled;
      lock.unlock();
      if (it.cb.on_done) it.cb.on_done(r);
      lock.lock();
    }
    pending_.clear();
  }

  script_fn fn_;
  model_desc desc_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<item> pending_;
  std::set<uint64_t> cancelled_;
  std::map<uint64_t, int32_t> resident_;  // job_key -> prompt length (chars) of its KV
  std::map<uint64_t, int32_t> calls_;
  std::vector<turn_request> seen_;
  uint64_t next_id_ = 0;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::atomic<int32_t> n_cancels_{0}, n_parks_{0}, n_releases_{0};
};

// Helpers to script turns.
inline turn_result answer(std::string content, finish_reason f = finish_reason::stop) {
  turn_result r;
  r.finish = f;
  r.message.role = role::assistant;
  r.message.content = std::move(content);
  return r;
}
inline turn_result call_tool(std::string name, std::string args_json) {
  turn_result r;
  r.finish = finish_reason::tool_calls;
  r.message.role = role::assistant;
  r.message.tool_calls.push_back(tool_call{"engine-id", std::move(name), std::move(args_json)});
  return r;
}

}  // namespace agentq::test
