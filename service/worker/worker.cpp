// The worker: a dispatcher thread (read + claim), a housekeeping thread (heartbeat, lease renewal,
// cancel poll, deadlines, reclaim) and a pool thread per held job running its agent loop.
// NOTE: a thread per held job keeps each loop a readable top-to-bottom routine (submit -> turn ->
// commit -> tools -> ...); the threads spend their life blocked on SQLite or a tool, and max_jobs
// bounds them (64 by default). They are pooled (job_pool.h): started once, not per job. A model turn
// is not waited for: the loop goes on where its result lands (drive(), turn_landed()); a first
// claim starts on the dispatcher up to its turn's submit, and a final turn whose end is only queued
// ends on the engine's thread, so a one-turn job needs no job thread at all (issue 29).
// Concurrency on the GPU comes from the engine batching their turns.
#include "worker/worker.h"
#include "worker/ack_sender.h"
#include "worker/call_ids.h"
#include "worker/control_plane.h"
#include "worker/end_batcher.h"
#include "worker/job_pool.h"

#include <pthread.h>
#include <unistd.h>

#include <agentq/engine.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "metrics/registry.h"
#include "net/http_client.h"
#include "obs/job_metrics.h"
#include "obs/obs_store.h"
#include "queue/queue.h"
#include "store/store.h"
#include "util/crypto.h"
#include "util/fault.h"
#include "util/json_depth.h"
#include "util/version.h"
#include "webhooks/signing.h"
#include "worker/agent_spec.h"
#include "worker/kv_marks.h"
#include "worker/kv_retention.h"
#include <agentq/thread_class.h>

namespace agentq::worker {

using json = nlohmann::json;
using store::job_status;
using store::write_status;
using clock_type = std::chrono::steady_clock;

namespace {

metrics::family_of<metrics::counter>& held_counter() {
  // NOTE: the worker's registry: its families reach the API's GET /metrics with the engine samples.
  static auto& c = obs::worker_registry().counter_family(
      "agentq_jobs_held_total", "Claims that held the job queued instead of running it, by limit.", {"reason"});
  return c;
}

std::string default_worker_id() {
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + crypto::to_hex(crypto::random_bytes(2));
}

// A worker whose batch-class jobs hold their share of its slots (max_batch_jobs) reads the other
// classes' streams this often while it waits for a batch slot (dispatch_loop).
constexpr int64_t k_reserve_poll_ms = 5;
// A first claim's request up to this size starts on the dispatcher (on_claim): its parse and its
// prompt's tokenization (in the engine's submit) take it well under a millisecond; a larger one (a
// long document) would hold up the next claims that long, so it starts on a job thread.
constexpr size_t k_dispatcher_start_max_bytes = 32 * 1024;

int32_t engine_priority(store::job_priority p) {
  return p == store::job_priority::high ? 2 : p == store::job_priority::normal ? 1 : 0;
}

// Built-in server-side tool transport: net::http_client (SSRF-guarded) + Standard Webhooks signing.
http_tool_fn make_default_http_tool(const std::string& allow_cidrs) {
  std::vector<net::cidr> allow;
  if (!allow_cidrs.empty()) {
    std::string err;
    auto parsed = net::parse_cidr_list(allow_cidrs, &err);
    if (parsed)
      allow = *parsed;
    else
      spdlog::error("worker: tool_allow_cidrs: {}", err);
  }
  auto client = std::make_shared<net::http_client>(net::ssrf_guard(allow));
  return [client](const http_tool_request& r) {
    net::http_request req;
    req.url = r.url;
    req.body = r.body_json;
    req.timeout = std::chrono::milliseconds(r.timeout_ms);
    req.max_response_bytes = static_cast<size_t>(r.max_response_bytes);
    req.headers.push_back({"Content-Type", "application/json"});
    if (!r.secret.empty()) {
      int64_t ts = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      if (auto h = webhooks::make_headers(r.secret, r.call_id, ts, r.body_json)) {
        req.headers.push_back({"webhook-id", h->id});
        req.headers.push_back({"webhook-timestamp", h->timestamp});
        req.headers.push_back({"webhook-signature", h->signature});
      }
    }
    auto res = client->send(req);
    http_tool_response out;
    if (!res.ok()) {
      out.error = std::string(net::to_string(res.error)) + ": " + res.message;
      out.retryable = res.error == net::http_error::timeout || res.error == net::http_error::connect_failed ||
                      res.error == net::http_error::protocol_error;
      return out;
    }
    out.status = res.response.status;
    out.body = std::move(res.response.body);
    out.ok = out.status >= 200 && out.status < 300;
    out.retryable = out.status >= 500 || out.status == 429;
    if (!out.ok) out.error = "HTTP " + std::to_string(out.status);
    return out;
  };
}

// What a job's transcript says about where its loop stands.
struct loop_state {
  std::vector<chat_message> messages;   // input + committed turns + recorded tool results, in call order
  std::vector<tool_call> pending;       // calls of the last turn without a recorded result
  int32_t n_turns = 0;                  // committed model turns
  bool last_turn_final = false;         // the last turn had no tool calls (crash after commit, before finish)
  std::string last_content;
};

// run_job's state between turns: a turn in flight carries it to where its result lands.
struct job_loop {
  int64_t created_ms = 0;  // the row's: the engine's arrival order
  store::job_priority priority = store::job_priority::normal;
  agent_spec spec;
  store::usage_totals usage;
  loop_state st;
};

loop_state rebuild(const std::vector<store::transcript_row>& rows, size_t n_input) {
  loop_state st;
  std::unordered_map<std::string, const store::transcript_row*> results;
  for (size_t i = n_input; i < rows.size(); ++i)
    if (rows[i].role == "tool") results[rows[i].tool_call_id] = &rows[i];
  auto to_msg = [](const store::transcript_row& r) {
    chat_message m;
    m.role = parse_role(r.role).value_or(role::user);
    m.content = r.content;
    m.tool_calls = tool_calls_from_json(r.tool_calls_json);
    m.tool_call_id = r.tool_call_id;
    m.name = r.name;
    return m;
  };
  for (size_t i = 0; i < rows.size() && i < n_input; ++i) st.messages.push_back(to_msg(rows[i]));
  for (size_t i = n_input; i < rows.size(); ++i) {
    if (rows[i].role != "assistant") continue;
    chat_message a = to_msg(rows[i]);
    st.n_turns++;
    st.pending.clear();
    st.last_turn_final = a.tool_calls.empty();
    st.last_content = a.content;
    auto calls = a.tool_calls;
    st.messages.push_back(std::move(a));
    for (auto& c : calls) {
      auto it = results.find(c.id);
      if (it == results.end()) {
        st.pending.push_back(c);
        continue;
      }
      chat_message t;
      t.role = role::tool;
      t.content = it->second->content;
      t.tool_call_id = c.id;
      t.name = c.name;
      st.messages.push_back(std::move(t));
    }
  }
  return st;
}

}  // namespace

// ---------------------------------------------------------------------------

struct job_ctx : std::enable_shared_from_this<job_ctx> {
  std::string job_id;
  int64_t epoch = 0;
  queue::delivery delivery;
  uint64_t job_key = 0;                    // engine KV key: of the job, or of its previous_response_id chain
  bool keep_kv = false;                    // a stored response: its KV outlives it (response_kv_ttl_s)
  bool batch_class = false;                // priority batch: its end joins a group (end_batcher.h)
  // A "parked" timeline span may be open: recorded by this loop, or by an earlier claim's (epoch > 1).
  // NOTE: without it every job closed spans it never had (an UPDATE on the timeline's own connection,
  // twice per job, contending with the store's writer for SQLite's write lock).
  bool park_open = false;
  int64_t created_ms = 0;                  // the job's submission (job latency metric)
  std::string tenant;                      // the job's tenant (with job_id: whose secret signs its tool calls)
  int64_t deadline_ms = 0;                 // wall clock; 0 = none
  std::string fault_subject;               // the request JSON, matched by AGENTQ_FAULT_MATCH (util/fault.h)
  bool may_want_delivery = true;           // store::may_want_delivery(its request): its end's job_end
  // The input messages while not yet in the transcript: written with the job's first write after its
  // claim (its first turn, or its end), in that write's transaction (store::step_commit).
  std::vector<store::transcript_row> pending_input;
  std::atomic<bool> cancelled{false}, lost{false}, stopping{false}, deadline_hit{false}, done{false};
  // Its end is queued at the end batcher (batch class): it holds no engine work or KV any more, so
  // its slot is lent to a new job while the group commits (free_slots()).
  std::atomic<bool> ending{false};
  // Its end is committing without its job thread (finish(): where the write is answered -- the
  // store's writer, or the end batcher's thread -- the rest runs and sets done): its loop is over,
  // its KV released, and its slot lent as an ending's is (free_slots()). Set under mu.
  std::atomic<bool> end_in_flight{false};
  std::atomic<uint64_t> request_id{0};     // engine request in flight; 0 = none
  // A model turn in flight: its submitter and its result meet here; the second to arrive goes on
  // with the loop (drive(), turn_landed()). turn_out is written before the result's arrival.
  std::atomic<int32_t> turn_meet{0};
  std::optional<turn_result> turn_out;
};

// Calls back once: with the turn's result, or with an error if the engine drops the callback
// unanswered (a std::promise answered that with an exception; nothing may wait forever).
struct turn_landing {
  std::function<void(turn_result)> land;
  bool called = false;
  ~turn_landing() {
    if (called || !land) return;
    turn_result r;
    r.finish = finish_reason::error;
    r.error = "the engine dropped the turn";
    land(std::move(r));
  }
};

struct worker::impl {
  worker_options options;
  std::shared_ptr<engine> eng;
  std::unique_ptr<control_plane> owned_db;  // the local one, when constructed on a store
  control_plane& db;
  queue::queue& q;
  bool start_engine;
  std::string id;

  std::atomic<bool> running{false};
  std::thread dispatcher, housekeeper;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<job_ctx>> active;
  std::condition_variable slot_freed;  // a held job's loop ended (ctx->done): the dispatcher may read
  std::mutex latency_mu;
  std::unordered_map<std::string, double> tool_latency_s;  // EWMA per tool name
  kv_marks kv_moves;  // engine spills / restores -> timeline marks (housekeeper writes them)
  kv_retention retained;  // KV of finished stored responses, kept for a continuation

  std::atomic<int64_t> n_claimed{0}, n_completed{0}, n_failed{0}, n_cancelled{0}, n_requires_action{0}, n_turns{0},
      n_tool_calls{0}, n_fenced{0}, n_resumed{0}, n_ended_where_landed{0};
  std::atomic<int64_t> n_spill_corrupt_seen{0};
  std::atomic<int32_t> n_ends_in_flight{0};  // finish()'s commits whose rest has not run yet (stop() waits)
  clock_type::time_point next_deleted_poll{};  // housekeeper only
  std::string incarnation;                     // this run of `id` (announce)
  std::atomic<bool> superseded{false};         // another run took `id` over: claim nothing more
  std::atomic<int64_t> n_fenced_at_start{0};
  int64_t started_ms = 0;
  std::unique_ptr<end_batcher> ends;  // batch-class job ends in groups; nullptr = off (or not started)
  std::unique_ptr<ack_sender> acks;   // the job threads' acks, pipelined; nullptr before start / after stop
  job_pool pool;  // NOTE: last: destroyed (joined) first, before anything its tasks use

  impl(worker_options o, std::shared_ptr<engine> e, std::unique_ptr<control_plane> owned, control_plane& cp,
       queue::queue& qq, bool se)
      : options(std::move(o)), eng(std::move(e)), owned_db(std::move(owned)), db(cp), q(qq), start_engine(se),
        pool(2 * options.max_jobs) {  // NOTE: up to max_jobs more whose ends wait at the end batcher
    id = options.worker_id.empty() ? default_worker_id() : options.worker_id;
    incarnation = options.incarnation.empty() ? std::to_string(store::now_ms()) + "-" + crypto::to_hex(crypto::random_bytes(4))
                                              : options.incarnation;
    if (!options.http_tool) options.http_tool = make_default_http_tool(options.tool_allow_cidrs);
  }

  // --- dispatch --------------------------------------------------------------

  void dispatch_loop() {
    auto next_reclaim = clock_type::now();
    // A previous run of this id read these and never acked them: its leases are fenced (start()),
    // so they are claimable now rather than after reclaim_idle_ms.
    handle_deliveries(q.read_pending(id, options.max_jobs, options.model));
    while (running) {
      reap();
      slots free = free_slots();
      // A failed device takes no new jobs (/readyz says why); nor does a worker the control plane refused.
      if (!eng->healthy() || superseded || !db.refused().empty()) free = {};
      if (free.any <= 0) {
        // NOTE: woken by the job that frees a slot (a group of batch ends frees many at once), not a
        // 10 ms poll: on a saturated worker that poll was an idle gap in every claim cycle. The
        // timeout still re-checks the engine's health and the control plane's refusal.
        std::unique_lock lock(mu);
        slot_freed.wait_for(lock, std::chrono::milliseconds(10),
                            [this] { return !running || free_slots_locked().any > 0; });
        continue;
      }
      // NOTE: with the batch class at its share (max_batch_jobs), the read leaves its streams and does
      // not block in Redis: a batch slot freed meanwhile would idle for the whole block. It waits
      // here instead, woken by that slot, and reads the other classes' streams again every
      // k_reserve_poll_ms (an interactive job's claim waits that long at most for its reserved slot).
      const bool batch_full = free.batch <= 0;
      auto ds = q.read(id, free.any, batch_full ? 0 : options.read_block_ms, options.model, free.batch);
      const bool got = !ds.empty();
      handle_deliveries(ds);
      if (clock_type::now() >= next_reclaim) {
        free = free_slots();
        if (free.any > 0) handle_deliveries(q.reclaim(id, free.any, options.model, free.batch));
        next_reclaim = clock_type::now() + std::chrono::milliseconds(options.reclaim_interval_ms);
      }
      if (batch_full && !got) {
        std::unique_lock lock(mu);
        slot_freed.wait_for(lock, std::chrono::milliseconds(k_reserve_poll_ms),
                            [this] { return !running || free_slots_locked().batch > 0; });
      }
    }
  }

  int32_t n_active() {
    std::lock_guard lock(mu);
    return static_cast<int32_t>(active.size());
  }

  // Jobs the dispatcher may claim now: max_jobs bounds the held jobs that still run (engine work,
  // tools, KV); a job whose end is committing (ending: in its group; end_in_flight) does not count,
  // but all held jobs stay under 2 x max_jobs (a grouped end's may hold a pool thread). NOTE: a batch job spent
  // ~27 of its ~70 ms in a slot waiting for its end group (session 23, queue9b's stage timings);
  // lending that slot keeps the engine fed meanwhile.
  // Of those, a batch-class job may take at most max_batch_jobs less the batch jobs holding one, so
  // the rest stay free for the other classes (interactive jobs find a slot during a Batch file).
  struct slots {
    int32_t any = 0;    // a job of any class may be claimed into this many
    int32_t batch = 0;  // of them, batch-class jobs (<= any)
  };
  slots free_slots() {
    std::lock_guard lock(mu);
    return free_slots_locked();
  }
  slots free_slots_locked() {
    int32_t used = 0, used_batch = 0, held = 0;  // NOTE: done ones not yet reaped count as gone
    for (auto& [k, c] : active) {
      const int32_t holds = c->done || c->ending || c->end_in_flight ? 0 : 1;
      used += holds;
      used_batch += c->batch_class ? holds : 0;
      held += c->done ? 0 : 1;
    }
    slots s;
    s.any = std::min(options.max_jobs - used, 2 * options.max_jobs - held);
    const int32_t batch_max = options.max_batch_jobs > 0 ? std::min(options.max_batch_jobs, options.max_jobs) : options.max_jobs;
    s.batch = std::min(s.any, batch_max - used_batch);
    return s;
  }

  // Held jobs whose loop has not ended (snapshot()'s size, without the copies).
  int32_t n_running() {
    std::lock_guard lock(mu);
    int32_t n = 0;
    // NOTE: a batch-class end waiting at the end batcher counts (its group flushes once every
    // running job's end is there); another end in flight does not (it never goes there).
    for (auto& [k, c] : active) n += c->done || (c->end_in_flight && !c->ending) ? 0 : 1;
    return n;
  }

  void reap() {
    std::lock_guard lock(mu);
    for (auto it = active.begin(); it != active.end();) {
      if (it->second->done)
        it = active.erase(it);
      else
        ++it;
    }
  }

  // Claim what was read in one go: the local control plane queues the claims together, so they
  // share one transaction (one fsync) rather than one each.
  void handle_deliveries(const std::vector<queue::delivery>& ds) {
    std::vector<const queue::delivery*> to_claim;
    std::vector<std::string> ids;
    for (const auto& d : ds) {
      if (!admit(d)) continue;
      // Two entries of one job in this read: the second is a duplicate (acked), as it would be once
      // the first is active.
      if (std::find(ids.begin(), ids.end(), d.job_id) != ids.end()) {
        q.ack(d);
        continue;
      }
      to_claim.push_back(&d);
      ids.push_back(d.job_id);
    }
    if (ids.empty()) return;
    auto claims = db.claim_jobs(ids, id, options.lease_ms, options.max_deliveries);
    for (size_t i = 0; i < to_claim.size() && i < claims.size(); ++i) on_claim(*to_claim[i], claims[i]);
  }

  // Before a claim: false when the entry is handled already (acked, ours, re-routed).
  bool admit(const queue::delivery& d) {
    if (d.job_id.empty()) {
      q.ack(d);
      return false;
    }
    {
      std::lock_guard lock(mu);
      auto it = active.find(d.job_id);
      if (it != active.end() && it->second->done) {  // its loop ended (e.g. requires_action): a new run
        active.erase(it);
        it = active.end();
      }
      if (it != active.end()) {
        // Ours already: a duplicate entry is acked; our own entry coming back from reclaim is kept.
        if (it->second->delivery.entry_id != d.entry_id || it->second->delivery.stream != d.stream) q.ack(d);
        return false;
      }
    }
    if (!options.model.empty() && !d.continuation && reroute(d)) return false;
    if (!eng->healthy()) {
      // Read before the engine failed (the dispatcher's check raced it): leave the job queued in
      // SQLite; the ack drops our inflight mark, so the reconciler re-publishes it for a healthy worker.
      q.ack(d);
      return false;
    }
    return true;
  }

  void on_claim(const queue::delivery& d, const store::claim_result& c) {
    switch (c.outcome) {
      case store::claim_outcome::claimed: break;
      case store::claim_outcome::busy:
        if (!d.reclaimed) q.ack(d);  // a duplicate of an entry its live owner holds
        return;
      case store::claim_outcome::not_claimable:
      case store::claim_outcome::not_found: q.ack(d); return;
      case store::claim_outcome::held:
        // NOTE: its tenant is at --tenant-max-running: the job waits in SQLite (hold = 1) and comes
        // back through the outbox when a slot frees; the entry is done with.
        held_counter().with({"tenant_max_running"}).inc();
        q.ack(d);
        return;
      case store::claim_outcome::poisoned:
        spdlog::warn("worker {}: job {} dead-lettered after {} deliveries", id, d.job_id, options.max_deliveries);
        q.dead_letter(d, "exceeded max deliveries");
        n_failed++;
        return;
      case store::claim_outcome::error: return;  // left pending: reclaimed later
    }
    fault_point("after_claim", c.won->job.request_json);
    n_claimed++;
    obs::observe_claim(c.won->job.created_ms, c.won->job.started_ms, c.won->job.updated_ms);
    spdlog::info("worker {}: job {} claimed (epoch {}, attempt {})", id, d.job_id, c.won->epoch, c.won->job.attempts);
    auto ctx = std::make_shared<job_ctx>();
    ctx->job_id = d.job_id;
    ctx->epoch = c.won->epoch;
    ctx->park_open = ctx->epoch > 1;
    ctx->delivery = d;
    ctx->job_key = job_key_of(kv_chain_of(c.won->job.request_json, d.job_id));
    // NOTE: the engine runs one turn per key at a time: a second continuation of the same chain
    // running now (a fork) takes its own key and re-prefills (only this thread adds to active).
    // The previous response's job turns terminal in SQLite a moment before its ctx is done here, and
    // a client continues as soon as it reads that, so wait up to 1 s for the key before forking.
    for (int i = 0; i < 100 && key_in_use(ctx->job_key); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (key_in_use(ctx->job_key)) ctx->job_key = job_key_of(d.job_id);
    retained.claim(ctx->job_key);  // a continuation: the chain's parked KV is this job's now
    ctx->fault_subject = c.won->job.request_json;
    ctx->may_want_delivery = store::may_want_delivery(c.won->job.request_json);
    // NOTE: set here, before the ctx is active, not in run_job: the dispatcher's next free_slots()
    // must count it against max_batch_jobs.
    ctx->batch_class = c.won->job.priority == store::job_priority::batch;
    kv_moves.track(ctx->job_key, ctx->job_id, ctx->epoch);
    {
      std::lock_guard lock(mu);
      active[d.job_id] = ctx;
    }
    // NOTE: a first claim starts here, on the dispatcher, up to its turn's submit when nothing on
    // the way may block (drive(): no tools, no read of an earlier transcript): a job thread's wake
    // and wait less per job (issue 29); anything else, and what follows a turn that is not ended
    // where it lands, runs on a job thread.
    if (ctx->epoch == 1 && c.won->job.request_json.size() <= k_dispatcher_start_max_bytes) {
      guarded(ctx, [&] {
        auto loop = prepare(*ctx, c.won->job);
        return loop && drive(*ctx, loop, false);
      });
      return;
    }
    pool.run([this, ctx, row = c.won->job] { guarded(ctx, [&] { return run_job(*ctx, row); }); });
  }

  // Runs a piece of the job's loop on a job thread; fn returns true when the loop went on elsewhere
  // (a turn in flight). The loop's end marks the job done, unless its end is still committing (the
  // rest of its finish() marks it) or the loop left this thread.
  template <class F>
  void guarded(const std::shared_ptr<job_ctx>& ctx, F&& fn) {
    bool left = false;
    try {
      left = fn();
    } catch (const link_error& e) {
      // The control plane did not answer: not the job's fault. Left as it is (not acked): the
      // lease lapses and the job is claimed again, here or elsewhere.
      spdlog::warn("worker {}: job {} dropped: the control plane did not answer ({})", id, ctx->job_id, e.what());
      n_fenced++;
      release_kv(*ctx);
    } catch (const std::exception& e) {
      spdlog::error("worker {}: job {} crashed: {}", id, ctx->job_id, e.what());
      db.finish_job(ctx->job_id, ctx->epoch, job_status::failed, "", std::string("internal error: ") + e.what(), {});
      release_kv(*ctx);
      ack(*ctx);
    }
    if (!left && !ctx->end_in_flight) mark_done(*ctx);
  }

  // The job's loop and its end are over: its slot is free (the dispatcher reaps it).
  void mark_done(job_ctx& c) {
    {
      std::lock_guard lock(mu);  // NOTE: under mu, so the dispatcher's predicate cannot miss it
      c.done = true;
    }
    slot_freed.notify_one();
  }

  // An entry of a legacy (model-less) stream whose job is for another model: published to that
  // model's stream, then acked here (publish first: the ack keeps the new inflight mark). True if moved.
  bool reroute(const queue::delivery& d) {
    if (d.stream.find(":jobs:" + options.model + ":") != std::string::npos) return false;  // the model's own stream
    std::map<std::string, std::string> models;
    std::optional<store::job_row> row;
    try {
      models = db.job_models({d.job_id});
      auto it = models.find(d.job_id);
      if (it == models.end() || it->second == options.model) return false;
      row = db.get_job(d.job_id);
    } catch (const link_error&) {
      return true;  // left pending: reclaimed later
    }
    auto it = models.find(d.job_id);
    int prio = row ? static_cast<int>(row->priority) : 1;
    if (!q.publish(d.job_id, prio, {}, it->second)) return true;  // Redis trouble: left pending, reclaimed later
    q.ack(d);
    spdlog::info("worker {}: job {} is for model '{}', not '{}': moved to its model's stream", id, d.job_id, it->second,
                 options.model);
    return true;
  }

  // --- housekeeping ------------------------------------------------------------

  std::vector<std::shared_ptr<job_ctx>> snapshot() {
    std::lock_guard lock(mu);
    std::vector<std::shared_ptr<job_ctx>> out;
    for (auto& [k, c] : active)
      if (!c->done) out.push_back(c);
    return out;
  }

  void interrupt(job_ctx& c) {
    if (uint64_t r = c.request_id.load()) eng->cancel(r);
  }

  void housekeeping_loop() {
    auto now = clock_type::now();
    auto next_heartbeat = now, next_renew = now, next_cancel = now, next_retained = now;
    while (running) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(20, options.cancel_poll_ms)));
      now = clock_type::now();
      auto jobs = snapshot();
      if (options.timeline) kv_moves.flush(*options.timeline, id);
      if (now >= next_heartbeat) {
        announce(false, jobs);
        std::vector<queue::delivery> held;
        for (auto& c : jobs) held.push_back(c->delivery);
        if (!held.empty()) q.touch(id, held);
        next_heartbeat = now + std::chrono::milliseconds(options.heartbeat_ms);
      }
      if (now >= next_renew && !jobs.empty()) {
        std::vector<std::pair<std::string, int64_t>> leases;
        for (auto& c : jobs) leases.push_back({c->job_id, c->epoch});
        auto lost = db.renew_leases(leases, options.lease_ms);
        for (auto& jid : lost)
          for (auto& c : jobs)
            if (c->job_id == jid && !c->done && !c->lost.exchange(true)) interrupt(*c);
        next_renew = now + std::chrono::milliseconds(std::max<int64_t>(1, options.lease_ms / 3));
      }
      if (now >= next_cancel && !jobs.empty()) {
        std::vector<std::string> ids;
        for (auto& c : jobs) ids.push_back(c->job_id);
        for (auto& jid : db.cancelled_among(ids))
          for (auto& c : jobs)
            if (c->job_id == jid && !c->cancelled.exchange(true)) interrupt(*c);
        next_cancel = now + std::chrono::milliseconds(options.cancel_poll_ms);
      }
      if (now >= next_retained) {
        expire_retained(now);
        next_retained = now + std::chrono::seconds(1);
      }
      int64_t wall = store::now_ms();
      for (auto& c : jobs)
        if (c->deadline_ms > 0 && wall >= c->deadline_ms && !c->deadline_hit) {
          c->deadline_hit = true;
          interrupt(*c);
        }
    }
  }

  // What this worker serves and holds, for GET /v1/workers (queue::announce).
  std::string advert(const std::vector<std::shared_ptr<job_ctx>>& jobs) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    const model_desc& m = eng->model();
    const engine_stats es = eng->stats();
    json running_ids = json::array();
    for (auto& c : jobs) running_ids.push_back(c->job_id);
    int32_t n_running = static_cast<int32_t>(jobs.size());
    int32_t n_slots = 0;  // free_slots(): a job whose end is committing lends its slot
    for (auto& c : jobs) n_slots += c->ending || c->end_in_flight ? 0 : 1;
    json models = json::array();
    models.push_back({{"name", m.name}, {"arch", m.arch}, {"context_length", m.n_ctx}, {"chat_family", m.chat_family},
                      {"kv_type", m.kv_type}, {"kv_capacity_tokens", m.kv_capacity_tokens}, {"ready", es.healthy},
                      // the pool's geometry: a weightless control plane's KV-room check at submit (#28)
                      {"kv_room", {{"layers", m.n_layer}, {"block_size", m.kv.block_size}, {"pages", m.kv.n_pages},
                                   {"window", m.kv.window}, {"layers_windowed", m.kv.n_layer_windowed}}}});
    return json{{"id", id},
                {"group", options.group.empty() ? id : options.group},
                {"incarnation", incarnation},
                {"host", host},
                {"pid", getpid()},
                {"version", k_version},
                {"protocol", db.protocol_version()},
                {"refused", db.refused()},  // non-empty: the control plane refused this worker; it claims nothing
                {"device", m.device},
                {"engine_threads", options.n_engine_threads},
                {"share", options.share.to_json()},
                {"models", models},
                {"kv", {{"blocks_total", es.n_blocks_total}, {"blocks_used", es.n_blocks_used},
                        {"blocks_free", es.n_blocks_free}, {"blocks_parked", es.n_blocks_parked},
                        {"capacity_tokens", m.kv_capacity_tokens}, {"spill_bytes", es.n_spill_bytes}}},
                {"max_jobs", options.max_jobs},
                {"running_jobs", n_running},
                {"running_job_ids", running_ids},
                {"free_slots", superseded || !es.healthy || !db.refused().empty() ? 0 : std::max(0, options.max_jobs - n_slots)},
                {"healthy", es.healthy},
                {"started_ms", started_ms},
                {"last_heartbeat_ms", store::now_ms()}}
        .dump();
  }

  // Heartbeat + advert; the first one (take_over) claims the id from an older run.
  void announce(bool take_over, const std::vector<std::shared_ptr<job_ctx>>& jobs) {
    if (superseded) return;
    if (q.announce(id, incarnation, advert(jobs), take_over) != queue::queue::announce_result::superseded) return;
    // NOTE: the newer run fenced every lease of this id when it started, so these jobs are not
    // ours any more; dropping them here only stops wasted work (their writes would be refused).
    superseded = true;
    spdlog::error("worker {}: another process started with this worker id; this run ({}) stops claiming and drops its "
                  "jobs (check --worker-id / the data directory)", id, incarnation);
    for (auto& c : jobs)
      if (!c->lost.exchange(true)) interrupt(*c);
  }

  // --- the agent loop ------------------------------------------------------------

  // NOTE: the fault point stays on the job thread, after the durable write and before the ack is
  // handed over: a crash there leaves the entry pending, as before. The ack itself is sent by the
  // ack sender (ack_sender.h); the job thread does not wait for Redis.
  void ack(job_ctx& c) {
    fault_point("before_xack", c.fault_subject);
    if (acks)
      acks->post(c.delivery);
    else
      q.ack(c.delivery);
  }

  // The job is no longer ours (fenced / cancelled): drop the KV; ack only if the job is over.
  void on_lost(job_ctx& c) {
    n_fenced++;
    release_kv(c);
    std::optional<store::job_row> row;
    try {
      row = db.get_job(c.job_id);
    } catch (const link_error&) {
      return;  // unknown: not acked; the entry is reclaimed and the claim decides
    }
    if (!row || store::is_terminal(row->status)) {
      if (row && row->status == job_status::cancelled) n_cancelled++;
      ack(c);
    }
  }

  // The job is over here: its KV may go (and its KV marks stop after the queued ones).
  void release_kv(job_ctx& c) {
    eng->release(c.job_key);
    kv_moves.forget(c.job_key);
  }

  // What finish() says once its write answered.
  struct end_note {
    job_status st;
    bool with_turn;
    int32_t turns;
    std::string error;
  };

  // The job's end, with the turn that ended it (if any) and its input messages (if not written yet)
  // in the same write. The caller's loop returns right after.
  void finish(job_ctx& c, job_status st, const std::string& content, const std::string& error,
              const store::usage_totals& usage, std::optional<store::turn_commit> turn = std::nullopt) {
    json result = json::object();
    if (st == job_status::completed || st == job_status::incomplete) {
      result["content"] = content;
      // NOTE: only an object or an array is kept as "parsed", so text that cannot be one is not
      // parsed at all (the parse of plain text built an error message per job).
      size_t first = content.find_first_not_of(" \t\r\n");
      if (first != std::string::npos && (content[first] == '{' || content[first] == '[')) {
        json parsed = json::parse(content, nullptr, false);
        if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_array())) result["parsed"] = parsed;
      }
    }
    store::step_commit step;
    step.input = std::move(c.pending_input);
    c.pending_input.clear();
    end_note note{st, turn.has_value(), usage.turns, error};
    step.turn = std::move(turn);
    step.end = store::job_end{st, result.dump(), error, usage, c.may_want_delivery};
    // A batch-class job's end shares its group's transaction and ack round trip (acked when ok).
    const bool grouped = ends && c.batch_class;
    const bool retain = c.keep_kv && options.response_kv_ttl_s > 0 &&
                        (st == job_status::completed || st == job_status::incomplete);
    if (grouped) {
      // Its turns are over: the KV goes now (a lost lease re-runs the job from its messages anyway),
      // and its slot is lent while the group commits (free_slots()).
      if (!retain) release_kv(c);
      {
        std::lock_guard lock(mu);  // NOTE: under mu, as done: the dispatcher's predicate cannot miss it
        c.ending = true;
      }
      slot_freed.notify_one();
      if (retain || c.park_open) {  // the rest does more than quick work: on this thread, after the commit
        ended(c, ends->commit_end({c.job_id, c.epoch, std::move(step)}, c.delivery, c.fault_subject), note, true,
              retain);
        return;
      }
      end_without_waiting(c, note, true, [&](std::function<void(write_status)> done) {
        ends->commit_end_async({c.job_id, c.epoch, std::move(step)}, c.delivery, c.fault_subject, std::move(done));
      });
      return;
    }
    if (retain || c.park_open) {
      ended(c, db.commit_step(c.job_id, c.epoch, std::move(step)), note, false, retain);
      return;
    }
    // NOTE: as a grouped end's: its turns are over, so the KV goes now, and end_without_waiting lends
    // the slot while the end commits (one-request jobs held their slots through the commit's fsync:
    // 64 slots bounded the one-request figure, issue 29, docs/queue_perf.md session 39).
    release_kv(c);
    end_without_waiting(c, note, false, [&](std::function<void(write_status)> done) {
      db.commit_step_async(c.job_id, c.epoch, std::move(step), std::move(done));
    });
  }

  // NOTE: the job thread does not wait for its end's commit (issue 29: a wait and a wake per job, a
  // third of the job threads' context switches): the rest (counters, the KV's release, the ack) runs
  // where the write is answered -- the store's writer thread for the local control plane, the end
  // batcher's thread for a grouped end -- and marks the job done; its slot is lent meanwhile (its KV
  // was released before). A lost end's on_lost reads the store: it goes to the job
  // pool, never onto the thread that answered. send(done) queues the write.
  template <class Send>
  void end_without_waiting(job_ctx& c, const end_note& note, bool grouped, Send send) {
    auto self = c.shared_from_this();
    {
      std::lock_guard lock(mu);  // NOTE: under mu, as done: the dispatcher's predicate cannot miss it
      c.end_in_flight = true;
    }
    slot_freed.notify_one();
    n_ends_in_flight++;
    try {
      send([this, self, note, grouped](write_status ws) {
        if (ws != write_status::ok) {
          pool.run([this, self] {
            on_lost(*self);
            mark_done(*self);
            n_ends_in_flight--;
          });
          return;
        }
        ended(*self, ws, note, grouped, false);
        mark_done(*self);
        n_ends_in_flight--;  // NOTE: last: stop() may tear the worker down once it reads 0
      });
    } catch (...) {
      {
        std::lock_guard lock(mu);
        c.end_in_flight = false;  // not queued: the caller's handler ends the job (its slot held again)
      }
      n_ends_in_flight--;
      throw;
    }
  }

  // After the job's end was written (ws): on_lost when it was not; else counters, the KV's release
  // or retention, and the ack (a grouped end's ack is the end batcher's).
  void ended(job_ctx& c, write_status ws, const end_note& note, bool grouped, bool retain) {
    if (ws != write_status::ok) {
      on_lost(c);
      return;
    }
    if (note.with_turn) {
      n_turns++;
      fault_point("after_turn_commit", c.fault_subject);
    }
    (note.st == job_status::completed ? n_completed : n_failed)++;
    int64_t now = store::now_ms();
    obs::observe_finish(c.created_ms, now, store::to_string(note.st));
    // NOTE: the arguments only when the line is written: this may run on the store's writer thread.
    if (spdlog::should_log(spdlog::level::info))
      spdlog::info("worker {}: job {} {} after {} turns{}", id, c.job_id, store::to_string(note.st), note.turns,
                   note.error.empty() ? "" : ": " + note.error);
    close_parked(c, now);
    if (retain)
      retain_kv(c);
    else if (!grouped && !c.end_in_flight)  // an end in flight released its KV before it was sent
      release_kv(c);
    if (!grouped) ack(c);
  }

  // --- KV kept for previous_response_id (kv_retention.h) -----------------------------

  // NOTE: parked like a client wait (pinned, spilled or dropped by the residency policy); the
  // TTL only bounds how long the key may hold memory or a spill file, so it is not the park hint.
  void retain_kv(job_ctx& c) {
    eng->park(c.job_key, std::min(options.response_kv_ttl_s, options.client_tool_park_s));
    kv_moves.forget(c.job_key);
    retained.hold(c.job_key, c.job_id,
                  clock_type::now() + std::chrono::milliseconds(int64_t(options.response_kv_ttl_s * 1000)));
  }

  bool key_in_use(uint64_t key) {
    std::lock_guard lock(mu);
    for (auto& [jid, c] : active)
      if (!c->done && c->job_key == key) return true;
    return false;
  }

  // TTL over, or the response deleted (by a route of another process: polled every 5 s).
  void expire_retained(clock_type::time_point now) {
    for (uint64_t k : retained.expired(now))
      if (!key_in_use(k)) eng->release(k);
    if (now < next_deleted_poll || retained.size() == 0) return;
    next_deleted_poll = now + std::chrono::seconds(5);
    for (auto& [k, jid] : retained.held()) {
      std::optional<store::job_row> row;
      try {
        row = db.get_job(jid);
      } catch (const std::exception&) {
        // The store is busy: ask again at the next 1 s tick, not after a whole 5 s poll (a delete
        // seen late keeps a dead response's KV that much longer).
        next_deleted_poll = now;
        continue;
      }
      if (!row) job_deleted(jid);
    }
  }

  void job_deleted(const std::string& job_id) {
    if (auto k = retained.drop_job(job_id)) {
      if (!key_in_use(*k)) eng->release(*k);
      return;
    }
    // NOTE: a job's own key, unless a continuation of it (same key) runs or holds it now.
    uint64_t k = job_key_of(job_id);
    if (!retained.held_by_other(k, job_id) && !key_in_use(k)) eng->release(k);
  }

  // The job's loop from its claim: true when it went on elsewhere (a turn in flight, drive()).
  bool run_job(job_ctx& c, const store::job_row& row) {
    auto loop = prepare(c, row);
    return loop && drive(c, loop);
  }

  // The loop's state from the claimed row (and the transcript of an earlier claim, epoch > 1);
  // nullptr when the job ended here (an invalid request).
  std::shared_ptr<job_loop> prepare(job_ctx& c, const store::job_row& row) {
    std::string err;
    auto spec = parse_agent_spec(row.request_json, &err);
    if (!spec) {
      finish(c, job_status::failed, "", "invalid request: " + err, {});
      return nullptr;
    }
    if (row.deadline_ms > 0)
      c.deadline_ms = row.deadline_ms;
    else if (spec->deadline_seconds > 0)
      c.deadline_ms = row.created_ms + static_cast<int64_t>(spec->deadline_seconds * 1000);
    auto loop = std::make_shared<job_loop>();
    loop->usage = store::usage_totals::from_json(row.usage_json);
    c.created_ms = row.created_ms;
    c.tenant = row.tenant;
    c.keep_kv = spec->keep_kv;

    // NOTE: a first claim (epoch 1) has no transcript to read: its rows are only ever written under
    // a lease (fenced on its epoch), and no lease came before this one. A read saved per job.
    auto rows = c.epoch == 1 ? std::vector<store::transcript_row>{} : db.read_transcript(c.job_id, c.epoch);
    if (rows.empty()) {
      std::vector<store::transcript_row> input;
      for (auto& m : spec->messages) {
        store::transcript_row r;
        r.role = role_name(m.role);
        r.content = m.content;
        if (!m.tool_calls.empty()) r.tool_calls_json = tool_calls_to_json(m.tool_calls);
        r.tool_call_id = m.tool_call_id;
        r.name = m.name;
        input.push_back(std::move(r));
      }
      // NOTE: not written now: they go with the job's first write (its first turn or its end), one
      // transaction instead of two; a crash before it leaves the transcript empty, as before a claim.
      rows = input;
      c.pending_input = std::move(input);
    } else if (rows.size() > spec->messages.size()) {
      n_resumed++;
    }
    loop->st = rebuild(rows, spec->messages.size());
    loop->spec = std::move(*spec);
    loop->created_ms = row.created_ms;
    loop->priority = row.priority;
    return loop;
  }

  // The loop until the job's end (false), or until a model turn is in flight and its result will
  // land after this thread left (true): the loop then goes on in turn_landed(). NOTE: not waiting
  // for the turn saves a wait and a wake per turn (issue 29: the job thread's futex, the engine's
  // wake of it); a result that is already in when the submitter is done goes on here.
  // may_block false (the dispatcher): the loop goes to a job thread before anything but a straight
  // way to the next turn's submit, and after a turn that is not ended where it lands.
  bool drive(job_ctx& c, const std::shared_ptr<job_loop>& loop, bool may_block = true) {
    const agent_spec* spec = &loop->spec;
    loop_state& st = loop->st;
    store::usage_totals& usage = loop->usage;
    for (;;) {
      if (!may_block && !straight_to_turn(c, *loop)) {
        go_on_job_thread(c.shared_from_this(), loop, std::nullopt);
        return true;
      }
      if (c.cancelled || c.lost) return on_lost(c), false;
      if (c.stopping) {
        if (db.release_job(c.job_id, c.epoch) == write_status::ok)
          ack(c);
        else
          on_lost(c);
        return false;
      }
      // A crash after committing a final turn: finish from the transcript, no re-generation.
      if (st.n_turns > 0 && st.last_turn_final) {
        finish(c, job_status::completed, st.last_content, "", usage);
        return false;
      }
      if (!st.pending.empty()) {
        auto client_calls = run_tools(c, *spec, st.pending);
        if (c.lost || c.cancelled) return on_lost(c), false;
        if (!client_calls.empty() && spec->finish_on_client_tools) {
          finish(c, job_status::completed, st.last_content, "", usage);
          return false;
        }
        if (!client_calls.empty()) {
          json pending = json::array();
          for (auto& tc : client_calls) pending.push_back({{"id", tc.id}, {"name", tc.name}, {"arguments", tc.arguments_json}});
          if (db.require_action(c.job_id, c.epoch, pending.dump()) != write_status::ok) return on_lost(c), false;
          n_requires_action++;
          eng->park(c.job_key, options.client_tool_park_s);
          record_parked(c, st.n_turns - 1, options.client_tool_park_s);
          ack(c);
          return false;
        }
        st = rebuild(db.read_transcript(c.job_id, c.epoch), spec->messages.size());
        continue;
      }
      // Limits before the next model turn.
      if (st.n_turns >= spec->max_turns) {
        finish(c, job_status::incomplete, st.last_content, "max_turns reached (" + std::to_string(spec->max_turns) + ")", usage);
        return false;
      }
      int64_t remaining = spec->max_output_tokens - usage.completion_tokens;
      if (remaining <= 0) {
        finish(c, job_status::incomplete, st.last_content, "max_output_tokens reached", usage);
        return false;
      }
      if (c.deadline_hit || (c.deadline_ms > 0 && store::now_ms() >= c.deadline_ms)) {
        finish(c, job_status::incomplete, st.last_content, "deadline exceeded", usage);
        return false;
      }

      turn_request req;
      req.job_key = c.job_key;
      req.arrival_seq = static_cast<uint64_t>(loop->created_ms);
      req.priority = engine_priority(loop->priority);
      req.messages = st.messages;
      for (auto& t : spec->tools) req.tools.push_back(t.def);
      req.choice = (st.n_turns == 0 || spec->tool_choice_every_turn) ? spec->choice : tool_choice{};
      req.parallel_tool_calls = spec->parallel_tool_calls;
      req.json_ws = spec->json_ws;
      req.response_schema_json = spec->response_schema_json;
      req.sampling = spec->sampling;
      req.max_tokens = static_cast<int32_t>(std::min<int64_t>(spec->max_tokens_per_turn, remaining));
      req.stop = spec->stop;
      req.prediction = spec->prediction;

      turn_callbacks cb;
      auto landing = std::make_shared<turn_landing>();
      landing->land = [this, self = c.shared_from_this(), loop](turn_result r) { turn_landed(self, loop, std::move(r)); };
      cb.on_done = [landing](turn_result r) {
        landing->called = true;
        landing->land(std::move(r));
      };
      if (spec->stream_tokens) {
        std::string jid = c.job_id;
        int64_t epoch = c.epoch;
        control_plane* s = &db;
        cb.on_text = [s, jid, epoch](std::string_view piece) {
          s->append_event(jid, epoch, "token", json{{"text", std::string(piece)}}.dump());  // NOTE: not awaited
        };
      }
      close_parked(c, store::now_ms());
      c.turn_meet = 0;
      c.request_id = eng->submit(std::move(req), std::move(cb));
      if (c.cancelled || c.lost || c.deadline_hit || c.stopping) interrupt(c);  // raced with the poller
      fault_point("mid_decode", c.fault_subject);
      if (c.turn_meet.fetch_add(1, std::memory_order_acq_rel) == 0) return true;  // it lands later
      turn_result res = std::move(*c.turn_out);
      c.turn_out.reset();
      if (!may_block && !ends_here(c, res)) {
        go_on_job_thread(c.shared_from_this(), loop, std::move(res));
        return true;
      }
      if (!after_turn(c, *loop, std::move(res))) return false;
    }
  }

  // The top of drive()'s loop goes straight to a turn's submit: no end, release, tool or limit.
  bool straight_to_turn(const job_ctx& c, const job_loop& loop) const {
    const loop_state& st = loop.st;
    if (c.cancelled || c.lost || c.stopping || c.deadline_hit) return false;
    if ((st.n_turns > 0 && st.last_turn_final) || !st.pending.empty() || st.n_turns >= loop.spec.max_turns) return false;
    if (loop.spec.max_output_tokens - loop.usage.completion_tokens <= 0) return false;
    return !(c.deadline_ms > 0 && store::now_ms() >= c.deadline_ms);
  }

  // A turn's result, on the engine's thread (or wherever the engine drops a callback). The second
  // of submitter and result goes on: the submitter if it is still here, else this. A final turn
  // whose end needs no wait (the common one-turn job) is ended here: its end is queued for the
  // store's writer (finish()) and nothing here blocks; anything else goes to a job thread.
  void turn_landed(const std::shared_ptr<job_ctx>& self, const std::shared_ptr<job_loop>& loop, turn_result res) {
    job_ctx& c = *self;
    c.turn_out = std::move(res);
    if (c.turn_meet.fetch_add(1, std::memory_order_acq_rel) == 0) return;  // the submitter takes it
    turn_result r = std::move(*c.turn_out);
    c.turn_out.reset();
    if (ends_here(c, r)) {
      // NOTE: counted before: once its end is queued, the end's rest may finish the job and stop()
      // may tear the worker down; after that this reads only the job's own context.
      n_ended_where_landed++;
      try {
        if (!after_turn(c, *loop, std::move(r))) {
          if (!c.end_in_flight) mark_done(c);
          return;
        }
      } catch (...) {
        // Handled on a job thread, as on one (guarded() may write).
        pool.run([this, self, e = std::current_exception()] { guarded(self, [&]() -> bool { std::rethrow_exception(e); }); });
        return;
      }
      go_on_job_thread(self, loop, std::nullopt);  // not reached: a final turn's after_turn ends the job
      return;
    }
    go_on_job_thread(self, loop, std::move(r));
  }

  // The loop goes on on a job thread: after the turn's result r if any, then drive().
  void go_on_job_thread(std::shared_ptr<job_ctx> self, std::shared_ptr<job_loop> loop, std::optional<turn_result> r) {
    pool.run([this, self = std::move(self), loop = std::move(loop), r = std::move(r)]() mutable {
      guarded(self, [&] { return (!r || after_turn(*self, *loop, std::move(*r))) && drive(*self, loop); });
    });
  }

  // A final turn, not cancelled or failed, whose end is only queued (finish(): no KV retained, no
  // parked span to close; the end batcher's queue, or a control plane whose commit_step_async
  // queues): after_turn() ends the job without blocking.
  bool ends_here(const job_ctx& c, const turn_result& r) const {
    if (r.finish == finish_reason::error || r.finish == finish_reason::cancelled) return false;
    if (!r.message.tool_calls.empty() || c.park_open || c.cancelled || c.lost || c.stopping || c.deadline_hit)
      return false;
    if (c.keep_kv && options.response_kv_ttl_s > 0) return false;
    return (ends && c.batch_class) || db.commits_async();
  }

  // The loop after a turn's result: false when the job is over (ended, released or lost), true
  // when the loop goes on (drive()).
  bool after_turn(job_ctx& c, job_loop& loop, turn_result res) {
    loop_state& st = loop.st;
    store::usage_totals& usage = loop.usage;
    c.request_id = 0;
    note_spill_corruption();

    if (res.finish == finish_reason::cancelled) {
      if (c.cancelled || c.lost) return on_lost(c), false;
      if (c.stopping) return true;  // released at the top of the loop
      if (c.deadline_hit) {
        finish(c, job_status::incomplete, st.last_content, "deadline exceeded", usage);
        return false;
      }
    }
    if (res.finish == finish_reason::error && !eng->healthy()) {
      // The device failed under this job, not the job itself: hand it back for another worker
      // (the dispatcher stops claiming while the engine is unhealthy).
      spdlog::error("worker {}: engine failed; handing job {} back: {}", id, c.job_id, res.error);
      if (db.release_job(c.job_id, c.epoch) == write_status::ok)
        ack(c);
      else
        on_lost(c);
      return false;
    }
    if (res.finish == finish_reason::error || res.finish == finish_reason::cancelled) {
      finish(c, job_status::failed, "", "engine: " + (res.error.empty() ? std::string("cancelled") : res.error), usage);
      return false;
    }

    // Commit the turn before any of its tools run. Call ids are ours (call_ids.h): unique per
    // job, turn and index, so stable across crashes and distinct across jobs.
    int32_t turn_idx = st.n_turns;
    chat_message msg = res.message;
    msg.role = role::assistant;
    for (size_t i = 0; i < msg.tool_calls.size(); ++i) msg.tool_calls[i].id = make_call_id(c.job_id, turn_idx, i);
    usage.prompt_tokens += res.usage.n_tokens_prompt;
    usage.cached_tokens += res.usage.n_tokens_cached;
    usage.computed_tokens += res.usage.n_tokens_computed;
    usage.completion_tokens += res.usage.n_tokens_generated;
    usage.accepted_prediction_tokens += res.usage.n_tokens_draft_accepted;
    usage.rejected_prediction_tokens += res.usage.n_tokens_draft_rejected;
    usage.turns = turn_idx + 1;
    store::turn_commit tc;
    tc.turn_idx = turn_idx;
    tc.content = msg.content;
    if (!msg.tool_calls.empty()) tc.tool_calls_json = tool_calls_to_json(msg.tool_calls);
    // NOTE: the turn event's data is made here too (store::set_turn_usage), not on the store's writer.
    store::turn_usage_fields tu;
    tu.prompt_tokens = res.usage.n_tokens_prompt;
    tu.cached_tokens = res.usage.n_tokens_cached;
    tu.computed_tokens = res.usage.n_tokens_computed;
    tu.completion_tokens = res.usage.n_tokens_generated;
    // speculative decoding (#32), under OpenAI's names
    tu.accepted_prediction_tokens = res.usage.n_tokens_draft_accepted;
    tu.rejected_prediction_tokens = res.usage.n_tokens_draft_rejected;
    tu.finish = to_string(res.finish);
    tu.queue_ms = res.usage.queue_ms;
    tu.prefill_ms = res.usage.prefill_ms;
    tu.decode_ms = res.usage.decode_ms;
    store::set_turn_usage(tc, tu);
    tc.job_usage = usage;
    obs::observe_turn(res.usage);
    spdlog::debug("worker {}: job {} turn {}: {} prompt tokens ({} cached), {} generated, prefill {:.0f} ms, decode {:.0f} ms",
                  id, c.job_id, turn_idx, res.usage.n_tokens_prompt, res.usage.n_tokens_cached,
                  res.usage.n_tokens_generated, res.usage.prefill_ms, res.usage.decode_ms);
    if (msg.tool_calls.empty()) {
      // A final turn: committed together with the job's end (one write; before, a crash between
      // the two left a final turn that the next claim finished from the transcript).
      bool truncated = res.finish == finish_reason::length;
      finish(c, truncated ? job_status::incomplete : job_status::completed, msg.content,
             truncated ? "output truncated at max_tokens_per_turn / max_output_tokens" : "", usage, std::move(tc));
      return false;
    }
    store::step_commit step;
    step.input = std::move(c.pending_input);
    c.pending_input.clear();
    step.turn = std::move(tc);
    if (db.commit_step(c.job_id, c.epoch, std::move(step)) != write_status::ok) return on_lost(c), false;
    n_turns++;
    fault_point("after_turn_commit", c.fault_subject);

    st.n_turns++;
    st.last_content = msg.content;
    st.last_turn_final = false;
    st.pending = msg.tool_calls;
    st.messages.push_back(msg);
    return true;
  }

  // --- KV across restarts (docs/kv_and_batching.md "Restarts and deploys") ----------------

  // Start-up: spill files of jobs that are no longer queued, running or waiting (they ended
  // while no process held their KV, e.g. cancelled in requires_action across a restart) go.
  void prune_spill() {
    std::set<uint64_t> live;
    try {
      live = db.live_kv_keys();
    } catch (const std::exception& e) {
      spdlog::warn("worker {}: listing live jobs for the KV spill sweep failed ({}); keeping every file", id, e.what());
      return;
    }
    const int32_t n = eng->prune_spill([&live](uint64_t k) { return live.count(k) != 0; });
    if (n > 0) spdlog::info("worker {}: removed {} KV spill file(s) of jobs that are over", id, n);
  }

  // stop(): the resident KV goes to disk (bounded by shutdown_spill_s) so a restart resumes it.
  void shutdown_spill() {
    if (options.shutdown_spill_s < 0) return;
    const kv_shutdown_report r = eng->spill_for_shutdown(options.shutdown_spill_s);
    const double gbps = r.ms > 0 ? double(r.n_bytes) / (r.ms * 1e6) : 0;
    spdlog::info("worker {}: shutdown spill: {} sequence(s) on disk ({} written now), {} tokens, {} bytes in {:.1f} ms "
                 "({:.3f} GB/s); {} dropped ({} tokens) past --shutdown-spill-s {}; {} too short to keep",
                 id, r.n_seqs, r.n_written, r.n_tokens, r.n_bytes, r.ms, gbps, r.n_dropped, r.n_tokens_dropped,
                 options.shutdown_spill_s, r.n_short);
  }

  // A spill file failed its checksum (torn or corrupted): the turn recomputed; say so once per file.
  void note_spill_corruption() {
    const int64_t n = eng->stats().n_spill_corrupt;
    const int64_t before = n_spill_corrupt_seen.exchange(n);
    if (n > before)
      spdlog::warn("worker {}: {} KV spill file(s) failed the checksum and were recomputed ({} in all)", id, n - before, n);
  }

  // --- timeline (obs/obs_store.h): fenced on the job's epoch, best effort ---------------

  // An open "parked" span; the next turn's submit (or the job's end) closes it.
  void record_parked(job_ctx& c, std::optional<int32_t> turn, double expected_wait_s) {
    if (!options.timeline) return;
    c.park_open = true;
    obs::timeline_entry e;
    e.kind = "parked";
    e.start_ms = store::now_ms();
    e.turn = turn;
    char label[96];
    std::snprintf(label, sizeof label, "KV parked (expected wait %.1f s)", expected_wait_s);
    e.label = label;
    e.attrs = {{"expected_wait_s", expected_wait_s}, {"worker", id}};
    options.timeline->record(c.job_id, c.epoch, e);
  }

  void close_parked(job_ctx& c, int64_t now_ms) {
    if (!options.timeline || !c.park_open) return;
    options.timeline->close_open(c.job_id, c.epoch, "parked", now_ms);
    c.park_open = false;
  }

  void record_tool(job_ctx& c, const tool_call& tc, int64_t start_ms, int32_t n_attempts, const http_tool_response& res) {
    spdlog::debug("worker {}: job {} tool {} ({}): {} after {} attempt(s), {} ms", id, c.job_id, tc.name, tc.id,
                  res.ok ? "ok" : res.error, n_attempts, store::now_ms() - start_ms);
    if (!options.timeline) return;
    obs::timeline_entry e;
    e.kind = "tool";
    e.start_ms = start_ms;
    e.end_ms = store::now_ms();
    e.turn = turn_of_call_id(tc.id);
    e.label = tc.name + (res.ok ? "" : " (failed: " + res.error + ")") +
              (n_attempts > 1 ? ", " + std::to_string(n_attempts) + " attempts" : "");
    e.attrs = {{"name", tc.name}, {"call_id", tc.id}, {"attempts", n_attempts}, {"retries", n_attempts - 1},
               {"ok", res.ok}, {"duration_ms", *e.end_ms - start_ms}};
    if (res.status) e.attrs["status_code"] = res.status;
    if (!res.ok) e.attrs["error"] = res.error;
    options.timeline->record(c.job_id, c.epoch, e);
  }

  double expected_wait_s(const tool_spec& t) {
    std::lock_guard lock(latency_mu);
    auto it = tool_latency_s.find(t.def.name);
    if (it != tool_latency_s.end()) return it->second;
    return t.http ? t.http->timeout_ms / 2000.0 : options.client_tool_park_s;
  }

  void observe_latency(const std::string& name, double s) {
    std::lock_guard lock(latency_mu);
    auto [it, fresh] = tool_latency_s.emplace(name, s);
    if (!fresh) it->second = 0.8 * it->second + 0.2 * s;
  }

  // Run the server-side calls among `calls` (in parallel) and record their results; return the
  // client-side calls still waiting on the client.
  std::vector<tool_call> run_tools(job_ctx& c, const agent_spec& spec, const std::vector<tool_call>& calls) {
    std::unordered_map<std::string, bool> recorded;
    for (auto& r : db.read_tool_results(c.job_id, c.epoch)) recorded[r.call_id] = true;
    std::vector<tool_call> client_calls;
    std::vector<std::pair<const tool_call*, const tool_spec*>> server_calls;
    for (auto& tc : calls) {
      if (recorded.count(tc.id)) continue;
      const tool_spec* t = spec.find_tool(tc.name);
      if (!t) {
        db.record_tool_result(c.job_id, c.epoch, {tc.id, "error: no tool named '" + tc.name + "'", true}, tc.name);
        continue;
      }
      if (t->http)
        server_calls.push_back({&tc, t});
      else
        client_calls.push_back(tc);
    }
    if (server_calls.empty()) return client_calls;
    double wait = 0;
    for (auto& [tc, t] : server_calls) wait = std::max(wait, expected_wait_s(*t));
    eng->park(c.job_key, wait);
    record_parked(c, turn_of_call_id(server_calls.front().first->id), wait);
    std::vector<std::future<void>> running;
    for (auto& [tc, t] : server_calls) {
      db.append_event(c.job_id, c.epoch, "tool_call", json{{"call_id", tc->id}, {"name", tc->name}}.dump());
      running.push_back(std::async(std::launch::async, [this, &c, tc = tc, t = t] { run_http_tool(c, *tc, *t); }));
    }
    for (auto& f : running) f.get();
    return client_calls;
  }

  void run_http_tool(job_ctx& c, const tool_call& tc, const tool_spec& t) {
    n_tool_calls++;
    json args = json::parse(tc.arguments_json, nullptr, false);
    http_tool_request req;
    req.url = t.http->url;
    req.body_json = json{{"job_id", c.job_id}, {"call_id", tc.id}, {"name", tc.name},
                         {"arguments", args.is_discarded() ? json(tc.arguments_json) : args}}
                        .dump();
    req.job_id = c.job_id;
    req.call_id = tc.id;
    // NOTE: looked up per call, not per job: a rotated secret takes effect at the next call.
    req.secret = options.tool_secret ? options.tool_secret(c.job_id, c.tenant) : db.tool_secret(c.job_id, c.tenant);
    req.timeout_ms = t.http->timeout_ms;
    req.max_response_bytes = t.http->max_response_bytes;
    http_tool_response res;
    auto t0 = clock_type::now();
    int64_t start_ms = store::now_ms();
    int32_t n_attempts = 0;
    for (int32_t attempt = 0;; ++attempt) {
      res = options.http_tool(req);
      n_attempts = attempt + 1;
      if (res.ok || !res.retryable || attempt >= t.http->max_retries || c.cancelled || c.lost) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 6)));
    }
    double took_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    observe_latency(tc.name, took_s);
    obs::observe_tool(took_s, res.ok);
    record_tool(c, tc, start_ms, n_attempts, res);
    fault_point("after_tool_effect", c.fault_subject);
    store::tool_output out;
    out.call_id = tc.id;
    if (res.ok) {
      // NOTE: a hostile tool server's deeply nested reply stays raw text (dump() would recurse)
      json body = util::json_depth(res.body) > util::k_max_json_depth ? json(json::value_t::discarded)
                                                                       : json::parse(res.body, nullptr, false);
      out.output = body.is_object() && body.contains("output")
                       ? (body["output"].is_string() ? body["output"].get<std::string>() : body["output"].dump())
                       : res.body;
    } else {
      out.output = "error: " + res.error;
      out.is_error = true;
    }
    if (db.record_tool_result(c.job_id, c.epoch, out, tc.name) != write_status::ok) c.lost = true;
  }
};

// ---------------------------------------------------------------------------

worker::worker(worker_options options, std::shared_ptr<engine> engine, store::store& store, queue::queue& queue,
               bool start_engine) {
  auto local = make_local_control_plane(store);
  control_plane& cp = *local;
  impl_ = std::make_unique<impl>(std::move(options), std::move(engine), std::move(local), cp, queue, start_engine);
}

worker::worker(worker_options options, std::shared_ptr<engine> engine, control_plane& cp, queue::queue& queue,
               bool start_engine)
    : impl_(std::make_unique<impl>(std::move(options), std::move(engine), nullptr, cp, queue, start_engine)) {}

worker::~worker() { stop(); }

void worker::start() {
  if (impl_->running.exchange(true)) return;
  impl_->prune_spill();
  impl_->eng->on_kv_move([impl = impl_.get()](const kv_move_event& e) { impl->kv_moves.on_move(e); });
  if (impl_->start_engine) impl_->eng->start();
  impl_->started_ms = store::now_ms();
  // A stable id (#28): jobs the previous run of this id still held are fenced and claimable now.
  try {
    auto fenced = impl_->db.fence_worker_leases(impl_->id);
    impl_->n_fenced_at_start = static_cast<int64_t>(fenced.size());
    if (!fenced.empty())
      spdlog::info("worker {}: fenced {} lease(s) held by its previous run; they are claimable again", impl_->id,
                   fenced.size());
  } catch (const std::exception& e) {
    spdlog::warn("worker {}: fencing the previous run's leases failed ({}); they expire with their lease",
                 impl_->id, e.what());
  }
  impl_->q.ensure_groups(impl_->id, impl_->options.model);
  if (impl_->options.batch_end_linger_us > 0) {
    end_batcher_options eo;
    eo.max_group = impl_->options.max_jobs;
    eo.linger = std::chrono::microseconds(impl_->options.batch_end_linger_us);
    end_batcher_deps deps;
    impl* w = impl_.get();
    deps.commit = [w](std::vector<store::step_item> items) { return w->db.commit_steps(std::move(items)); };
    deps.ack = [w](const std::vector<queue::delivery>& ds) { w->q.ack_many(ds); };
    deps.n_running = [w] { return w->n_running(); };
    deps.before_ack = [](const std::string& subject) { fault_point("before_xack", subject); };
    impl_->ends = std::make_unique<end_batcher>(eo, std::move(deps));
  }
  impl_->acks = std::make_unique<ack_sender>([w = impl_.get()](const std::vector<queue::delivery>& ds) { w->q.ack_many(ds); });
  impl_->announce(true, {});
  impl_->dispatcher = std::thread([this] {
    // NOTE: handoff class (half --worker-nice's increment): every claim passes through this thread;
    // at the engine's nice it waited for a CPU ~3x its own CPU time per Batch line (0.07 against
    // 0.023 ms, schedstat) while freed slots stayed empty, at the process's it slowed a Batch
    // file's acceptance by ~10 % (issue 29, session 36: here +4 % Batch jobs/s, acceptance within
    // its run-to-run spread).
    util::name_thread("aq-dispatch", util::thread_class::handoff);
    impl_->dispatch_loop();
  });
  impl_->housekeeper = std::thread([this] { impl_->housekeeping_loop(); });
  spdlog::info("worker {} started", impl_->id);
}

void worker::stop() {
  if (!impl_->running.exchange(false)) return;
  impl_->q.interrupt_reads();  // NOTE: the dispatcher's blocking read ends now, not read_block_ms later
  if (impl_->dispatcher.joinable()) impl_->dispatcher.join();
  for (auto& c : impl_->snapshot()) {
    c->stopping = true;
    impl_->interrupt(*c);
  }
  // Job threads release their jobs at their next step (after an in-flight tool returns).
  while (impl_->n_active() > 0) {
    impl_->reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // An end's rest may still be on its way out of the store's writer (finish()).
  while (impl_->n_ends_in_flight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (impl_->ends) {
    auto es = impl_->ends->stats();
    spdlog::info("worker {}: {} batch-class job ends in {} groups", impl_->id, es.n_ends, es.n_groups);
    impl_->ends.reset();  // no job thread is left to hand it an end
  }
  if (impl_->acks) {
    auto as = impl_->acks->stats();
    spdlog::info("worker {}: {} job acks in {} pipelines", impl_->id, as.n_acks, as.n_batches);
    impl_->acks.reset();  // sends what is queued (no job thread is left to post one)
  }
  if (impl_->housekeeper.joinable()) impl_->housekeeper.join();
  if (impl_->start_engine) impl_->eng->stop();
  impl_->shutdown_spill();
  impl_->eng->on_kv_move(nullptr);
  if (impl_->options.timeline) impl_->kv_moves.flush(*impl_->options.timeline, impl_->id);
  spdlog::info("worker {} stopped", impl_->id);
}

const std::string& worker::id() const { return impl_->id; }

void worker::job_deleted(const std::string& job_id) { impl_->job_deleted(job_id); }

worker_stats worker::stats() const {
  worker_stats s;
  s.n_claimed = impl_->n_claimed;
  s.n_completed = impl_->n_completed;
  s.n_failed = impl_->n_failed;
  s.n_cancelled = impl_->n_cancelled;
  s.n_requires_action = impl_->n_requires_action;
  s.n_turns = impl_->n_turns;
  s.n_tool_calls = impl_->n_tool_calls;
  s.n_fenced = impl_->n_fenced;
  s.n_resumed = impl_->n_resumed;
  s.n_ended_where_landed = impl_->n_ended_where_landed;
  s.n_job_threads = impl_->pool.n_threads();
  s.n_active = impl_->n_active();
  s.n_running = impl_->n_running();
  s.n_leases_fenced_at_start = impl_->n_fenced_at_start;
  s.superseded = impl_->superseded;
  return s;
}

}  // namespace agentq::worker
