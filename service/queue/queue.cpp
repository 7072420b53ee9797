// Redis Streams dispatch: publish (XADD + inflight hash, one Lua call), priority reads,
// XAUTOCLAIM reclaim, ack, dead letter, worker liveness, the outbox relay and the reconciler.
#include "queue/queue.h"

#include <pthread.h>
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "store/store.h"
#include <agentq/thread_class.h>

namespace agentq::queue {

using json = nlohmann::json;

namespace {

// KEYS[1] stream, KEYS[2] inflight hash; ARGV job_id, priority, maxlen. Returns the entry id.
const char* k_publish_lua = R"lua(
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'job_id', ARGV[1], 'priority', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], KEYS[1] .. ' ' .. id)
return id
)lua";

// KEYS[1] stream, KEYS[2] inflight hash; ARGV group, entry id, job_id.
const char* k_ack_lua = R"lua(
local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if redis.call('HGET', KEYS[2], ARGV[3]) == KEYS[1] .. ' ' .. ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[3])
end
return n
)lua";

// KEYS[1] alive key, KEYS[2] advert key, KEYS[3] index; ARGV incarnation, ttl ms, advert, now ms,
// worker id, take_over ("1"/"0"). 1 = announced, 0 = another incarnation holds the id.
const char* k_announce_lua = R"lua(
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and cur ~= '1' and ARGV[6] ~= '1' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
return 1
)lua";

bool is_nogroup(const redis_reply& r) { return r.type == redis_reply::kind::error && r.str.rfind("NOGROUP", 0) == 0; }

// Parse [[id, [field, value, ...]], ...] into deliveries.
void parse_entries(const redis_reply& entries, const std::string& stream, bool continuation, bool reclaimed,
                   std::vector<delivery>& out) {
  for (auto& e : entries.elements) {
    if (e.elements.size() < 2) continue;
    const redis_reply& fields = e.elements[1];
    delivery d;
    d.stream = stream;
    d.entry_id = e.elements[0].str;
    d.continuation = continuation;
    d.reclaimed = reclaimed;
    for (size_t i = 0; i + 1 < fields.elements.size(); i += 2)
      if (fields.elements[i].str == "job_id") d.job_id = fields.elements[i + 1].str;
    out.push_back(std::move(d));  // NOTE: an entry without job_id is still returned so it can be acked
  }
}

}  // namespace

struct queue::impl {
  explicit impl(const redis_options& o) : consumer(o), control(o), relay(o) {}
  std::mutex consumer_mu, control_mu, relay_mu;
  redis_client consumer;   // worker side: (blocking) reads, reclaim, group creation
  redis_client control;    // worker side: ack, touch, heartbeat, dead letter (never behind a blocking read)
  redis_client relay;      // relay / reconciler / publish / liveness lookups
  std::atomic<int64_t> n_published{0}, n_read{0}, n_acked{0}, n_reclaimed{0}, n_dead_lettered{0}, n_relayed{0},
      n_reconciled{0};
  // The consumer connection's CLIENT ID (-1: not known), for interrupt_reads(); asked again after
  // each connect (consumer_id_connect: the consumer's n_reconnects it was asked at; under consumer_mu).
  std::atomic<int64_t> consumer_client_id{-1};
  int64_t consumer_id_connect = -1;
  std::map<std::string, bool> groups_made;  // relay side: streams with a group (reset on error)
  std::mutex models_mu;
  std::vector<std::string> models_cached;   // live_models(), refreshed at most once a second
  std::chrono::steady_clock::time_point models_at{};
};

queue::queue(queue_options options, store::store& store)
    : impl_(std::make_unique<impl>(options.redis)), options_(std::move(options)), store_(&store) {}

queue::queue(queue_options options) : impl_(std::make_unique<impl>(options.redis)), options_(std::move(options)) {}

queue::~queue() { stop_relay(); }

std::string queue::stream_key(int priority_idx) const {
  static const char* names[] = {"high", "normal", "low", "batch"};
  return options_.prefix + ":jobs:" + names[std::clamp(priority_idx, 0, 3)];
}
std::string queue::model_stream_key(const std::string& model, int priority_idx) const {
  static const char* names[] = {"high", "normal", "low", "batch"};
  return options_.prefix + ":jobs:" + model + ":" + names[std::clamp(priority_idx, 0, 3)];
}
std::string queue::worker_stream_key(const std::string& worker_id) const {
  return options_.prefix + ":worker:" + worker_id;
}
std::string queue::dead_letter_key() const { return options_.prefix + ":dead"; }

// ---------------------------------------------------------------------------
// Publishing

bool queue::publish(const std::string& job_id, int priority_idx, const std::string& worker_id,
                    const std::string& model) {
  return publish_many({{job_id, priority_idx, worker_id, model}})[0];
}

std::vector<bool> queue::publish_many(const std::vector<publish_item>& items) {
  std::vector<bool> ok(items.size(), false);
  if (items.empty()) return ok;
  std::vector<std::string> streams;
  for (auto& it : items)
    streams.push_back(!it.worker_id.empty() ? worker_stream_key(it.worker_id)
                      : !it.model.empty()   ? model_stream_key(it.model, it.priority_idx)
                                            : stream_key(it.priority_idx));
  std::lock_guard lock(impl_->relay_mu);
  auto& c = impl_->relay;
  for (auto& stream : streams) {
    if (impl_->groups_made[stream]) continue;
    auto g = c.command({"XGROUP", "CREATE", stream, options_.group, "0", "MKSTREAM"});
    if (!g.ok() && g.str.find("BUSYGROUP") == std::string::npos) {
      impl_->groups_made.clear();
      return ok;
    }
    impl_->groups_made[stream] = true;
  }
  std::vector<std::vector<std::string>> cmds;
  for (size_t i = 0; i < items.size(); ++i)
    cmds.push_back({"EVAL", k_publish_lua, "2", streams[i], options_.prefix + ":inflight", items[i].job_id,
                    std::to_string(items[i].priority_idx), std::to_string(options_.max_stream_len)});
  auto replies = c.pipeline(cmds);
  for (size_t i = 0; i < items.size(); ++i) {
    ok[i] = replies[i].ok();
    if (ok[i]) impl_->n_published++;
    else impl_->groups_made.clear();  // Redis may have been wiped or restarted: recreate groups
  }
  return ok;
}

int32_t queue::relay_once() {
  int32_t n = 0;
  if (!store_) return 0;  // a consumer-only queue (remote worker)
  for (const char* kind : {"publish", "continue"}) {
    auto rows = store_->fetch_outbox(kind, 256);
    if (rows.empty()) continue;
    // NOTE: routing (#28): each job goes to its model's stream. A publish row written since the
    // model rides in its payload carries it; the others' models are read from their requests.
    std::vector<publish_item> items;
    std::vector<std::string> lookup;
    for (auto& row : rows) {
      json p = json::parse(row.payload_json, nullptr, false);
      publish_item it{row.job_id, p.is_object() ? p.value("priority", 1) : 1, {}, {}};
      if (options_.route_by_model && p.is_object()) it.model = p.value("model", "");
      if (options_.route_by_model && it.model.empty()) lookup.push_back(row.job_id);
      items.push_back(std::move(it));
    }
    const auto models = lookup.empty() ? std::map<std::string, std::string>{} : store_->job_models(lookup);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& row = rows[i];
      auto& it = items[i];
      if (auto m = models.find(row.job_id); m != models.end()) it.model = m->second;
      if (row.kind == "continue" && !row.target.empty() && can_resume(row.target)) it.worker_id = row.target;
    }
    auto ok = publish_many(items);
    std::vector<int64_t> done;
    for (size_t i = 0; i < rows.size(); ++i)
      if (ok[i]) done.push_back(rows[i].id);  // failed rows stay in the outbox for the next pass
    if (!done.empty()) {
      n += static_cast<int32_t>(done.size());
      store_->complete_outbox(std::move(done)).get();
    }
    note_unserved(items, ok);
  }
  impl_->n_relayed += n;
  return n;
}

int32_t queue::reconcile_once() {
  if (!store_) return 0;
  // --tenant-max-running: held jobs with a free slot get their promotion (outbox rows) here.
  if (int32_t n = store_->refill_held(); n > 0) spdlog::info("queue: reconciler promoted {} held jobs", n);
  auto jobs = store_->list_dispatchable(options_.reconcile_grace_ms, 1000);
  if (jobs.empty()) return 0;
  std::vector<std::vector<std::string>> cmds;
  for (auto& j : jobs) cmds.push_back({"HGET", options_.prefix + ":inflight", j.id});
  std::vector<redis_reply> replies;
  {
    std::lock_guard lock(impl_->relay_mu);
    replies = impl_->relay.pipeline(cmds);
  }
  int32_t n = 0;
  const std::string worker_prefix = options_.prefix + ":worker:";
  for (size_t i = 0; i < jobs.size(); ++i) {
    const redis_reply& r = replies[i];
    if (r.type == redis_reply::kind::io_error) return n;  // Redis unreachable: try next time
    bool republish = r.is_nil();
    if (!republish && r.str.rfind(worker_prefix, 0) == 0) {
      // In a worker's continuation stream: only useful while that worker lives and claims.
      std::string rest = r.str.substr(worker_prefix.size());
      std::string worker_id = rest.substr(0, rest.find(' '));
      republish = !can_resume(worker_id);
    }
    if (!republish) continue;
    json req = json::parse(jobs[i].request_json, nullptr, false);
    std::string model = options_.route_by_model && req.is_object() && req.contains("model") && req["model"].is_string()
                            ? req["model"].get<std::string>()
                            : "";
    if (publish(jobs[i].id, static_cast<int>(jobs[i].priority), {}, model)) {
      n++;
      spdlog::info("queue: reconciler re-published {} ({})", jobs[i].id, store::to_string(jobs[i].status));
    }
  }
  impl_->n_reconciled += n;
  return n;
}

void queue::start_relay() {
  if (!store_ || relay_running_.exchange(true)) return;
  relay_thread_ = std::thread([this] {
    util::name_thread("aq-relay");  // per-thread profiles name it
    auto next_reconcile = std::chrono::steady_clock::now();
    while (relay_running_) {
      int32_t n = 0;
      try {
        n = relay_once();
        if (std::chrono::steady_clock::now() >= next_reconcile) {
          reconcile_once();
          next_reconcile = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.reconcile_interval_ms);
        }
      } catch (const std::exception& e) {
        spdlog::warn("queue: relay pass failed: {}", e.what());
      }
      // NOTE: poll, but wake on local commits so a job published in-process goes out at once.
      if (n == 0) store_->wait_events(0, std::chrono::milliseconds(options_.relay_interval_ms), store::store::wake::outbox);
    }
  });
}

void queue::stop_relay() {
  if (!relay_running_.exchange(false)) return;
  // NOTE: wakes the relay's idle wait (relay_interval_ms) at once. The flag is set first: a relay
  // between its check and its wait sleeps one interval at most (the store's waiters have no stop).
  if (store_) store_->wake_waiters();
  if (relay_thread_.joinable()) relay_thread_.join();
}

// ---------------------------------------------------------------------------
// Consumer side

std::vector<std::string> queue::consumer_streams(const std::string& worker_id, const std::string& model) const {
  std::vector<std::string> streams = {worker_stream_key(worker_id)};
  // By priority first (high, normal, low, batch), the model's stream before the legacy one of the
  // same priority, so a legacy high entry still overtakes the model's batch work.
  for (int p = 0; p < 4; ++p) {
    if (!model.empty()) streams.push_back(model_stream_key(model, p));
    streams.push_back(stream_key(p));
  }
  return streams;
}

bool queue::ensure_groups(const std::string& worker_id, const std::string& model) {
  std::lock_guard lock(impl_->consumer_mu);
  bool ok = true;
  std::vector<std::string> streams = consumer_streams(worker_id, model);
  for (auto& s : streams) {
    auto r = impl_->consumer.command({"XGROUP", "CREATE", s, options_.group, "0", "MKSTREAM"});
    if (!r.ok() && r.str.find("BUSYGROUP") == std::string::npos) ok = false;
  }
  return ok;
}

bool queue::is_batch_stream(const std::string& stream) const {
  static const std::string suffix = ":batch";
  return stream.size() > suffix.size() && stream.compare(stream.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         stream.rfind(options_.prefix + ":jobs:", 0) == 0;
}

std::vector<delivery> queue::read(const std::string& worker_id, int32_t max, int32_t block_ms, const std::string& model,
                                  int32_t max_batch) {
  std::vector<delivery> out;
  if (max <= 0) return out;
  if (max_batch < 0) max_batch = max;
  std::vector<std::string> streams = consumer_streams(worker_id, model);
  bool need_groups = false;
  {
    std::lock_guard lock(impl_->consumer_mu);
    auto& c = impl_->consumer;
    // NOTE: the other classes' streams (the worker's own, high, normal, low; 7 with a model's and
    // the legacy ones) are nearly always empty while a batch runs, and a read asked them one round
    // trip each before the batch streams — also every few ms while the batch share is full
    // (worker.cpp, k_reserve_poll_ms). Their lengths first, pipelined (one round trip): a stream of
    // length 0 has no entry to deliver (acked entries are deleted: k_ack_lua), so when all are 0
    // the pass below asks only the batch streams. Any entry, delivered or not, and they are read
    // one at a time by priority as before (an entry added meanwhile is read next time, as it would
    // be had it arrived just after the read).
    bool others_empty = false;
    {
      std::vector<std::vector<std::string>> lens;
      for (const auto& s : streams)
        if (!is_batch_stream(s)) lens.push_back({"XLEN", s});
      auto rs = c.pipeline(lens);
      others_empty = std::all_of(rs.begin(), rs.end(), [](const redis_reply& r) {
        return r.type == redis_reply::kind::integer && r.integer == 0;
      });
    }
    int32_t n_batch = 0;
    for (size_t i = 0; i < streams.size() && static_cast<int32_t>(out.size()) < max; ++i) {
      const bool batch = is_batch_stream(streams[i]);
      if (others_empty && !batch) continue;
      int32_t count = max - static_cast<int32_t>(out.size());
      if (batch) count = std::min(count, max_batch - n_batch);
      if (count <= 0) continue;
      const size_t n_before = out.size();
      auto r = c.command({"XREADGROUP", "GROUP", options_.group, worker_id, "COUNT", std::to_string(count), "STREAMS",
                          streams[i], ">"});
      if (is_nogroup(r)) need_groups = true;
      if (r.type == redis_reply::kind::io_error) break;
      if (r.type != redis_reply::kind::array) continue;
      for (auto& s : r.elements)
        if (s.elements.size() == 2) parse_entries(s.elements[1], streams[i], i == 0, false, out);
      if (batch) n_batch += static_cast<int32_t>(out.size() - n_before);
    }
    if (out.empty() && !need_groups && c.connected() && block_ms > 0) {
      // NOTE: COUNT 1 per stream; the batch streams only while a batch entry may still be taken.
      if (max_batch <= 0) streams.erase(std::remove_if(streams.begin(), streams.end(),
                                                       [this](const std::string& s) { return is_batch_stream(s); }),
                                        streams.end());
      if (impl_->consumer_id_connect != c.stats().n_reconnects) {  // a new connection: its id, once
        auto id = c.command({"CLIENT", "ID"});
        impl_->consumer_client_id = id.type == redis_reply::kind::integer ? id.integer : -1;
        impl_->consumer_id_connect = c.stats().n_reconnects;
      }
      std::vector<std::string> argv = {"XREADGROUP", "GROUP", options_.group, worker_id, "COUNT", "1",
                                       "BLOCK",      std::to_string(block_ms), "STREAMS"};
      for (auto& s : streams) argv.push_back(s);
      for (size_t i = 0; i < streams.size(); ++i) argv.push_back(">");
      auto r = c.command(argv);
      if (is_nogroup(r)) need_groups = true;
      if (r.type == redis_reply::kind::array)
        for (auto& s : r.elements)
          if (s.elements.size() == 2) parse_entries(s.elements[1], s.elements[0].str, s.elements[0].str == streams[0], false, out);
    }
  }
  if (need_groups) ensure_groups(worker_id, model);
  if (out.empty() && block_ms > 0 && !impl_->consumer.connected())
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(block_ms, 100)));  // don't spin while Redis is down
  impl_->n_read += static_cast<int64_t>(out.size());
  return out;
}

void queue::interrupt_reads() {
  const int64_t id = impl_->consumer_client_id.load();
  if (id < 0) return;
  std::lock_guard lock(impl_->control_mu);
  // NOTE: TIMEOUT (the default): the read returns as if its BLOCK ran out (an ERROR unblock is the
  // -UNBLOCKED a sentinel-mode client takes for a demoted master). A refusal (an ACL without CLIENT)
  // leaves the read to its timeout.
  impl_->control.command({"CLIENT", "UNBLOCK", std::to_string(id)});
}

std::vector<delivery> queue::reclaim(const std::string& worker_id, int32_t max, const std::string& model,
                                     int32_t max_batch) {
  std::vector<delivery> out;
  if (max_batch < 0) max_batch = max;
  std::vector<std::string> shared = consumer_streams(worker_id, model);
  shared.erase(shared.begin());  // not its own stream: continuations wait for it (reconciler)
  std::lock_guard lock(impl_->consumer_mu);
  int32_t n_batch = 0;
  for (size_t p = 0; p < shared.size() && static_cast<int32_t>(out.size()) < max; ++p) {
    const std::string& s = shared[p];
    const bool batch = is_batch_stream(s);
    int32_t count = max - static_cast<int32_t>(out.size());
    if (batch) count = std::min(count, max_batch - n_batch);
    if (count <= 0) continue;
    const size_t n_before = out.size();
    auto r = impl_->consumer.command({"XAUTOCLAIM", s, options_.group, worker_id,
                                      std::to_string(options_.reclaim_idle_ms), "0-0", "COUNT", std::to_string(count)});
    if (r.type != redis_reply::kind::array || r.elements.size() < 2) continue;
    parse_entries(r.elements[1], s, false, true, out);
    if (batch) n_batch += static_cast<int32_t>(out.size() - n_before);
  }
  impl_->n_reclaimed += static_cast<int64_t>(out.size());
  return out;
}

bool queue::touch(const std::string& worker_id, const std::vector<delivery>& held) {
  std::map<std::string, std::vector<std::string>> by_stream;
  for (auto& d : held) by_stream[d.stream].push_back(d.entry_id);
  std::lock_guard lock(impl_->control_mu);
  bool ok = true;
  for (auto& [stream, ids] : by_stream) {
    std::vector<std::string> argv = {"XCLAIM", stream, options_.group, worker_id, "0"};
    argv.insert(argv.end(), ids.begin(), ids.end());
    argv.push_back("JUSTID");
    ok = impl_->control.command(argv).ok() && ok;
  }
  return ok;
}

std::vector<std::string> queue::ack_command(const delivery& d) const {
  return {"EVAL", k_ack_lua, "2", d.stream, options_.prefix + ":inflight", options_.group, d.entry_id, d.job_id};
}

bool queue::ack(const delivery& d) {
  std::lock_guard lock(impl_->control_mu);
  auto r = impl_->control.command(ack_command(d));
  if (r.ok()) impl_->n_acked++;
  return r.ok();
}

int32_t queue::ack_many(const std::vector<delivery>& ds) {
  if (ds.empty()) return 0;
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(ds.size());
  for (const auto& d : ds) cmds.push_back(ack_command(d));
  std::vector<redis_reply> replies;
  {
    std::lock_guard lock(impl_->control_mu);
    replies = impl_->control.pipeline(cmds);
  }
  int32_t n = 0;
  for (const auto& r : replies) n += r.ok() ? 1 : 0;
  impl_->n_acked += n;
  return n;
}

bool queue::dead_letter(const delivery& d, const std::string& reason) {
  {
    std::lock_guard lock(impl_->control_mu);
    auto r = impl_->control.command({"XADD", dead_letter_key(), "MAXLEN", "~", std::to_string(options_.max_stream_len),
                                      "*", "job_id", d.job_id, "stream", d.stream, "entry_id", d.entry_id, "reason",
                                      reason});
    if (!r.ok()) return false;
  }
  impl_->n_dead_lettered++;
  return ack(d);
}

bool queue::heartbeat(const std::string& worker_id) {
  std::lock_guard lock(impl_->control_mu);
  return impl_->control
      .command({"SET", worker_stream_key(worker_id) + ":alive", "1", "PX", std::to_string(options_.heartbeat_ttl_ms)})
      .ok();
}

bool queue::is_alive(const std::string& worker_id) {
  std::lock_guard lock(impl_->relay_mu);
  auto r = impl_->relay.command({"EXISTS", worker_stream_key(worker_id) + ":alive"});
  return r.type == redis_reply::kind::integer && r.integer == 1;
}

bool queue::can_resume(const std::string& worker_id) {
  std::vector<redis_reply> r;
  {
    std::lock_guard lock(impl_->relay_mu);
    r = impl_->relay.pipeline({{"EXISTS", worker_stream_key(worker_id) + ":alive"}, {"GET", worker_stream_key(worker_id) + ":info"}});
  }
  if (r.size() != 2 || r[0].type != redis_reply::kind::integer || r[0].integer != 1) return false;
  if (r[1].is_nil() || r[1].str.empty()) return true;  // NOTE: alive without an advert (between the two writes)
  json a = json::parse(r[1].str, nullptr, false);
  if (!a.is_object()) return true;
  const bool refused = a.contains("refused") && a["refused"].is_string() && !a["refused"].get<std::string>().empty();
  const bool unhealthy = a.contains("healthy") && a["healthy"].is_boolean() && !a["healthy"].get<bool>();
  // NOTE (#28, "not overloaded"): every slot busy at its last heartbeat (free_slots 0 of max_jobs):
  // the continuation goes to any worker of the model, which re-prefills, instead of queueing
  // behind the owner's running jobs. A heartbeat old, so a worker that just filled up may still get
  // one; one that is full when the reconciler looks (after its grace) has its waiting one moved.
  const bool full = a.contains("free_slots") && a["free_slots"].is_number() && a["free_slots"].get<double>() <= 0;
  return !refused && !unhealthy && !full;
}

std::vector<delivery> queue::read_pending(const std::string& worker_id, int32_t max, const std::string& model) {
  std::vector<delivery> out;
  std::vector<std::string> streams = consumer_streams(worker_id, model);
  std::lock_guard lock(impl_->consumer_mu);
  for (size_t i = 0; i < streams.size() && static_cast<int32_t>(out.size()) < max; ++i) {
    // NOTE: id 0 instead of '>': this consumer's pending entries list, not new entries.
    auto r = impl_->consumer.command({"XREADGROUP", "GROUP", options_.group, worker_id, "COUNT",
                                      std::to_string(max - static_cast<int32_t>(out.size())), "STREAMS", streams[i], "0"});
    if (r.type != redis_reply::kind::array) continue;
    for (auto& s : r.elements)
      if (s.elements.size() == 2) parse_entries(s.elements[1], streams[i], i == 0, true, out);
  }
  impl_->n_reclaimed += static_cast<int64_t>(out.size());
  return out;
}

queue::announce_result queue::announce(const std::string& worker_id, const std::string& incarnation,
                                       const std::string& advert_json, bool take_over) {
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(impl_->control_mu);
  auto r = impl_->control.command({"EVAL", k_announce_lua, "3", worker_stream_key(worker_id) + ":alive",
                                   worker_stream_key(worker_id) + ":info", options_.prefix + ":workers", incarnation,
                                   std::to_string(options_.heartbeat_ttl_ms), advert_json, std::to_string(now),
                                   worker_id, take_over ? "1" : "0"});
  if (r.type != redis_reply::kind::integer) return announce_result::error;
  return r.integer == 1 ? announce_result::ok : announce_result::superseded;
}

std::vector<std::string> queue::list_workers() {
  std::vector<std::string> out;
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(impl_->relay_mu);
  auto& c = impl_->relay;
  const std::string index = options_.prefix + ":workers";
  c.command({"ZREMRANGEBYSCORE", index, "-inf", std::to_string(now - 7 * 86400000LL)});
  auto ids = c.command({"ZRANGE", index, "0", "-1"});
  if (ids.type != redis_reply::kind::array || ids.elements.empty()) return out;
  std::vector<std::string> mget = {"MGET"};
  for (auto& id : ids.elements) mget.push_back(worker_stream_key(id.str) + ":info");
  auto adverts = c.command(mget);
  if (adverts.type != redis_reply::kind::array) return out;
  for (auto& a : adverts.elements)
    if (a.type == redis_reply::kind::string) out.push_back(a.str);
  return out;
}

std::optional<std::vector<std::string>> queue::live_models() {
  {
    std::lock_guard lock(impl_->models_mu);
    if (impl_->models_at.time_since_epoch().count() != 0 &&
        std::chrono::steady_clock::now() - impl_->models_at < std::chrono::seconds(1))
      return impl_->models_cached;
  }
  std::vector<std::string> adverts;
  {
    std::lock_guard lock(impl_->relay_mu);
    if (!impl_->relay.command({"PING"}).ok()) return std::nullopt;
  }
  adverts = list_workers();
  std::vector<std::string> models;
  for (auto& a : adverts) {
    json w = json::parse(a, nullptr, false);
    if (!w.is_object() || !w.contains("models") || !w["models"].is_array()) continue;
    for (auto& m : w["models"])
      if (m.is_object() && m.contains("name") && m["name"].is_string()) models.push_back(m["name"].get<std::string>());
  }
  std::lock_guard lock(impl_->models_mu);
  impl_->models_cached = models;
  impl_->models_at = std::chrono::steady_clock::now();
  return models;
}

void queue::note_unserved(const std::vector<publish_item>& items, const std::vector<bool>& published) {
  if (!store_) return;  // a remote worker re-routing an entry: the control plane's relay says it
  std::optional<std::vector<std::string>> live;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!published[i] || items[i].model.empty() || !items[i].worker_id.empty()) continue;
    if (!live) live = live_models();
    if (!live) return;  // Redis cannot say: tell nobody
    if (std::find(live->begin(), live->end(), items[i].model) != live->end()) continue;
    // NOTE: the job stays queued in its model's stream; a worker serving the model takes it when it comes.
    store_->append_queued_event(items[i].job_id, "waiting",
                               json{{"model", items[i].model},
                                    {"reason", "no live worker serves model '" + items[i].model +
                                                   "'; the job waits in its queue until one does"}}
                                   .dump());
  }
}

std::optional<int64_t> queue::stream_length(const std::string& stream) {
  std::lock_guard lock(impl_->relay_mu);
  auto r = impl_->relay.command({"XLEN", stream});
  if (r.type != redis_reply::kind::integer) return std::nullopt;
  return r.integer;
}

std::optional<std::vector<bool>> queue::in_flight(const std::vector<std::string>& job_ids) {
  std::vector<bool> out;
  if (job_ids.empty()) return out;
  std::vector<std::vector<std::string>> cmds;
  for (auto& id : job_ids) cmds.push_back({"HEXISTS", options_.prefix + ":inflight", id});
  std::vector<redis_reply> replies;
  {
    std::lock_guard lock(impl_->relay_mu);
    replies = impl_->relay.pipeline(cmds);
  }
  for (auto& r : replies) {
    if (r.type != redis_reply::kind::integer) return std::nullopt;
    out.push_back(r.integer == 1);
  }
  return out;
}

queue_stats queue::stats() const {
  queue_stats s;
  s.n_published = impl_->n_published;
  s.n_read = impl_->n_read;
  s.n_acked = impl_->n_acked;
  s.n_reclaimed = impl_->n_reclaimed;
  s.n_dead_lettered = impl_->n_dead_lettered;
  s.n_relayed = impl_->n_relayed;
  s.n_reconciled = impl_->n_reconciled;
  std::scoped_lock lock(impl_->consumer_mu, impl_->control_mu, impl_->relay_mu);
  for (const redis_client* c : {&impl_->consumer, &impl_->control, &impl_->relay}) {
    s.redis.n_commands += c->stats().n_commands;
    s.redis.n_errors += c->stats().n_errors;
    s.redis.n_io_errors += c->stats().n_io_errors;
    s.redis.n_reconnects += c->stats().n_reconnects;
  }
  return s;
}

}  // namespace agentq::queue
