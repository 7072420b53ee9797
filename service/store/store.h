// The job store: SQLite is the source of truth for jobs, transcripts, events and the outbox.
// One writer thread applies write ops with group commit (many ops per transaction, each in
// its own savepoint); readers use their own connections. Used by the API, queue and workers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace agentq::store {

// ---------------------------------------------------------------------------
// Job states. completed/failed/cancelled/incomplete are terminal: once there, a job's row
// never changes again (every UPDATE carries `status NOT IN (terminal)`).
enum class job_status { queued, running, requires_action, completed, failed, cancelled, incomplete };
const char* to_string(job_status s);
std::optional<job_status> parse_job_status(std::string_view s);
bool is_terminal(job_status s);

// batch: jobs from a Batch file (POST /v1/batches); below low, fills idle capacity (issue 29).
enum class job_priority { high = 0, normal = 1, low = 2, batch = 3 };
const char* to_string(job_priority p);
std::optional<job_priority> parse_job_priority(std::string_view s);

int64_t now_ms();  // wall clock, milliseconds since the Unix epoch (all *_ms timestamps)

struct job_row {
  std::string id;                  // "job_<hex>"
  std::string tenant;
  job_status status = job_status::queued;
  job_priority priority = job_priority::normal;
  std::string request_json;        // the job spec as submitted (see worker/agent_spec.h)
  std::string result_json;         // final answer ({"content":..,"message":..}); empty until terminal
  std::string error;               // failure reason; empty if none
  std::string usage_json;          // {"prompt_tokens","cached_tokens","computed_tokens","completion_tokens","turns",
                                   //  "completion_tokens_details":{"accepted_prediction_tokens","rejected_prediction_tokens"}}
  std::string pending_json;        // requires_action: JSON array of pending tool calls [{id,name,arguments}]
  int32_t attempts = 0;            // claims since the job last waited on a client (poison detection)
  int64_t lease_epoch = 0;         // fencing token: bumped on every claim
  std::string lease_owner;         // worker id holding (or last holding: KV hint) the job
  int64_t lease_expires_ms = 0;    // 0 = no live lease
  std::string idempotency_key;     // empty = none
  std::string request_hash;        // hash of the request for idempotency conflicts
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0, updated_ms = 0;
  int64_t deadline_ms = 0;         // absolute; 0 = none
  int64_t deleted_ms = 0;          // > 0: a tombstone (content gone); the API treats it as absent
  bool store_content = true;       // false: store:false, content deleted once the result is delivered
};

struct new_job {
  std::string tenant;
  std::string request_json;
  job_priority priority = job_priority::normal;
  std::string idempotency_key;     // optional; unique per tenant
  std::string request_hash;        // required with idempotency_key
  int64_t deadline_ms = 0;         // absolute; 0 = none
  bool store_content = true;       // false: the request's "store": false
  std::string key_id;              // the submitting API key (job_keys: webhook and tool signing); "" = none
  std::string model;               // the request's "model", carried in the publish outbox row so the relay
                                   // routes without reading the request back; "" = the relay looks it up
};

enum class create_outcome { created, existing, conflict, error };
struct create_result {
  create_outcome outcome = create_outcome::error;
  job_row job;                     // created or existing (idempotent replay)
  std::string error;               // conflict / error: a message
};

// Fenced writes (worker side) and API-side transitions.
enum class write_status {
  ok,
  fenced,        // stale lease epoch, or the job already terminal / not in the expected state
  not_found,
  invalid,       // bad argument (e.g. tool outputs that match no pending call)
  error,         // SQLite failure; see log
};
const char* to_string(write_status s);

struct transcript_row {
  int64_t seq = 0;                 // per job, 0.. in commit order
  int32_t turn_idx = -1;           // the model turn that produced it; -1 = input message
  std::string role;                // system|user|assistant|tool
  std::string content;
  std::string tool_calls_json;     // assistant: JSON array [{id,name,arguments}]; else empty
  std::string tool_call_id;        // tool: the call it answers
  std::string name;                // tool: function name
  std::string usage_json;          // assistant: this turn's usage
  int64_t created_ms = 0;
};

struct job_event {
  int64_t id = 0;                  // global, strictly increasing (SSE Last-Event-ID)
  std::string job_id;
  std::string type;                // "status" | "turn" | "tool_call" | "tool_result" | "token" | ...
  std::string data_json;
  int64_t created_ms = 0;
};

struct outbox_row {
  int64_t id = 0;
  std::string kind;                // "publish" (job -> shared stream), "continue" (-> KV-holding worker),
                                   // "terminal" (written by older versions only: webhooks tail the
                                   // status events; the dispatcher drains what is left)
  std::string job_id;
  std::string payload_json;
  std::string target;              // continue: worker id that holds the KV
  int32_t attempts = 0;
  int64_t created_ms = 0;
};

// A claim won in SQLite: the fencing epoch every later write must carry.
struct lease {
  std::string job_id;
  int64_t epoch = 0;
  job_row job;                     // the row after the claim
};
enum class claim_outcome { claimed, busy /* live lease elsewhere */, not_claimable /* terminal / requires_action */, not_found, poisoned /* attempts exhausted */, error,
                           held /* tenant at --tenant-max-running: the job waits in SQLite (ack its entry) */ };
struct claim_result {
  claim_outcome outcome = claim_outcome::error;
  std::optional<lease> won;
};

struct tool_output {
  std::string call_id;
  std::string output;              // text handed to the model
  bool is_error = false;
};

struct usage_totals {
  int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0, completion_tokens = 0;
  // speculation (#32), OpenAI's completion_tokens_details names: proposals accepted / rejected
  int64_t accepted_prediction_tokens = 0, rejected_prediction_tokens = 0;
  int32_t turns = 0;
  std::string to_json() const;
  static usage_totals from_json(std::string_view json);  // empty / malformed -> zeros
};

// One committed model turn: the assistant message and its usage, written before tools run.
struct turn_commit {
  int32_t turn_idx = 0;
  std::string content;
  std::string tool_calls_json;     // JSON array [{id,name,arguments}] or empty
  std::string turn_usage_json;
  usage_totals job_usage;          // job totals after this turn
  // The turn's "turn" event data (turn_event_json()), made by the caller off the writer thread
  // (set_turn_usage()); empty = the writer makes it. NOTE: must equal turn_event_json(*this).
  std::string event_json;
};

// The "turn" event's data_json for t: {"tool_calls": [...], "turn": N, "usage": {...}} (nlohmann's
// key order), from t's JSON texts (parsed here).
std::string turn_event_json(const turn_commit& t);
// Sets t.turn_usage_json and t.event_json from the usage object (t.turn_idx and t.tool_calls_json
// set before): the same bytes the writer would make, without parsing the usage back.
void set_turn_usage(turn_commit& t, const nlohmann::json& usage);
// A model turn's usage as the worker reports it (the "usage" of the turn event).
struct turn_usage_fields {
  int64_t prompt_tokens = 0, cached_tokens = 0, computed_tokens = 0, completion_tokens = 0;
  int64_t accepted_prediction_tokens = 0, rejected_prediction_tokens = 0;  // completion_tokens_details
  std::string_view finish;
  double queue_ms = 0, prefill_ms = 0, decode_ms = 0;
};
// The same as set_turn_usage(t, the object of these fields) without building the object: the text
// written directly in nlohmann's key order (issue 29: the object and its two dumps were ~13 % of a
// job thread's CPU). NOTE: the bytes equal the object's dump (tests/unit/service/store.cpp).
void set_turn_usage(turn_commit& t, const turn_usage_fields& u);

// A job's end (finish_job's arguments), written with its last turn in one step_commit.
struct job_end {
  job_status status = job_status::completed;
  std::string result_json;
  std::string error;
  usage_totals usage;              // the job's totals
  // may_want_delivery(the job's stored request): false lets the end's commit leave the webhook scan
  // asleep (it reads the event on its next pass all the same); true (unknown) wakes it.
  bool may_want_delivery = true;
};

// The webhook scan's pre-filter (read_webhook_candidates) on a job's stored request text: false only
// when no delivery can be due (no "webhook" or "responses" string, no \u escape). The same rule as
// the scan's SQL (AQ_MAY_WANT_DELIVERY_SQL, store.cpp); unit.webhook_scan checks that they agree.
bool may_want_delivery(std::string_view request_json);

// Writes of one step of a job's loop that belong together, applied as ONE write op (one transaction,
// grouped with whatever else is queued) instead of one op (and commit) each: every part does what its
// own call does (init_transcript, commit_turn, finish_job), in this order; fenced: nothing written.
struct step_commit {
  std::vector<transcript_row> input;  // the job's input messages, written only if it has no transcript
                                      // rows yet (the first write after a claim); empty = none
  std::optional<turn_commit> turn;    // a model turn
  std::optional<job_end> end;         // the job's terminal state
};

// One job's step in a commit_steps group.
struct step_item {
  std::string job_id;
  int64_t epoch = 0;
  step_commit step;
};

struct store_options {
  std::string path;                      // SQLite file
  int32_t busy_timeout_ms = 5000;
  int32_t max_batch_ops = 512;           // write ops per transaction at most
  int32_t n_readers = 4;                 // reader connection pool size
  bool group_commit = true;              // false = one transaction per write op (benchmark baseline)
  // Background write ops (worker, relay, sweepers) a transaction takes at most beside a submit
  // (store/write_queue.h); <= 0: no bound (one class, arrival order, as before session 22).
  // NOTE: 64, not session 22's 16: a one-request job brings three background ops (claim, end, outbox
  // completion) per submit, so under a stream of submits 16 let them queue up behind each other and
  // the dispatcher's claims waited behind ends (issue 29, docs/queue_perf.md session 39: one-request
  // jobs/s +5 %, an interactive job beside a batch p50 12 -> 10 ms, submit p99 at 1,000/s unchanged).
  int32_t n_background_shared = 64;
  // While submits arrive (one taken within the last 10 x this), a group of background ops alone waits
  // up to this long for a submit to share its commit (write_queue.h, linger_policy); 0 = never.
  int32_t background_linger_us = 2000;
  int64_t tenant_max_running = 0;        // running jobs per tenant at most (claims past it hold the job); 0 = none
  std::function<int64_t()> clock;        // ms since the epoch for every timestamp; empty = now_ms() (tests: fake)
};

// The database file's size and free space (metrics, retention).
struct store_space {
  int64_t page_size = 0, n_pages = 0, n_free_pages = 0;
  int64_t db_bytes = 0;                  // the main file (n_pages * page_size)
  int64_t wal_bytes = 0;                 // the -wal file on disk
};

struct store_stats {
  int64_t n_write_ops = 0, n_transactions = 0, n_write_errors = 0;
  // WAL checkpoints (store/checkpointer.h): passes on the checkpointer's thread, tails the writer
  // copied (a few frames, so the WAL restarts), whole checkpoints the writer ran as the backstop.
  int64_t n_checkpoint_passes = 0, n_checkpoint_tails = 0, n_checkpoint_backstops = 0;
  int64_t n_background_lingers = 0;  // background-only groups that waited for a submit (store_options)
  int64_t n_isolated_replays = 0;    // groups applied again, a savepoint per op, after an op threw
};

class store {
 public:
  // Open (creating if needed), apply pending migrations, start the writer thread.
  // nullptr with *error set when the file can't be opened, a migration fails, or the database
  // is newer than this binary knows ("database schema version N is newer than this agentq (M)").
  static std::unique_ptr<store> open(const store_options& options, std::string* error);
  virtual ~store() = default;

  // The newest schema version compiled into this binary.
  static int32_t latest_schema_version();

  // --- API side ------------------------------------------------------------
  // Insert a queued job + "status" event + "publish" outbox row (+ its job_keys row), atomically. With an
  // idempotency key: same (tenant,key,hash) -> existing; same key, other hash -> conflict.
  virtual std::future<create_result> create_job(new_job job) = 0;
  // The same, answered through done instead of a future (issue 29: the HTTP thread does not wait on
  // the commit): done runs once, on the store's writer thread, after the COMMIT is durable (or with
  // outcome error when it failed). It must be quick and must not wait on the store.
  virtual void create_job_async(new_job job, std::function<void(create_result)> done) = 0;
  // Reads (reader connection; see committed data only). tenant empty = any tenant.
  virtual std::optional<job_row> get_job(const std::string& job_id, const std::string& tenant = {}) = 0;
  // Newest first; before_id is a cursor (exclusive; empty = from the newest). status empty = any.
  virtual std::vector<job_row> list_jobs(const std::string& tenant, std::optional<job_status> status,
                                         int32_t limit, const std::string& before_id = {}) = 0;
  // ok, fenced (already terminal), not_found. The worker running it notices within its cancel poll.
  virtual std::future<write_status> cancel_job(const std::string& job_id, const std::string& tenant = {}) = 0;
  // requires_action -> queued with the outputs recorded; a "continue" outbox row routes the job
  // back to the worker holding its KV. invalid: an output for no pending call, or calls left
  // unanswered; fenced: job not in requires_action.
  virtual std::future<write_status> submit_tool_outputs(const std::string& job_id,
                                                        std::vector<tool_output> outputs,
                                                        const std::string& tenant = {}) = 0;
  virtual std::vector<transcript_row> read_transcript(const std::string& job_id) = 0;
  // get_job (any tenant) and read_transcript for many jobs, each call's reads in one read transaction
  // (one snapshot, the connection's page cache kept across them); answers in the ids' order.
  virtual std::vector<std::optional<job_row>> get_jobs(const std::vector<std::string>& job_ids) = 0;
  virtual std::vector<std::vector<transcript_row>> read_transcripts(const std::vector<std::string>& job_ids) = 0;
  // Events of one job with id > after_id (SSE replay), oldest first.
  virtual std::vector<job_event> read_events(const std::string& job_id, int64_t after_id, int32_t limit) = 0;
  // What the webhook scan reads: of the next `limit` events after after_id (any type), only the
  // status events whose job's stored request holds a "webhook" key, the string "responses" (a
  // Responses job: the OpenAI fan-out) or a "\u" escape (a key spelled with escapes: the API stores
  // requests as nlohmann dumps, keys unescaped, so only then can the substring test miss), oldest first;
  // scanned_to is the last event id looked at (after_id when there was none), where the scan's
  // cursor moves even when no event of the page was wanted; full: the page held `limit` events, so
  // more may follow now (a job end whose request cannot want a delivery does not wake the scan, so
  // it reads a backlog of them a page at a time).
  struct webhook_scan_page {
    std::vector<job_event> events;
    int64_t scanned_to = 0;
    bool full = false;
  };
  virtual webhook_scan_page read_webhook_candidates(int64_t after_id, int32_t limit) = 0;
  // Events of one tenant's jobs with id > after_id (GET /v1/events), oldest first.
  virtual std::vector<job_event> read_tenant_events(const std::string& tenant, int64_t after_id,
                                                    int32_t limit) = 0;
  // The newest event id (0 when there is none): where a stream with no cursor starts.
  virtual int64_t last_event_id() = 0;
  // What a waiter wakes for: a commit in this process that wrote job events of any type (event
  // streams), a status event a webhook is sent for (requires_action, terminal: the webhook scan), or
  // outbox rows (the relay). Commits that wrote none of these wake nobody.
  enum class wake { event, webhook_status, outbox };
  // Block until such a commit or timeout; true if woken by one. Other processes' commits are seen
  // by re-reading. after_id is unused (kept for callers' clarity).
  virtual bool wait_events(int64_t after_id, std::chrono::milliseconds timeout, wake on = wake::event) = 0;
  // Wake every wait_events waiter now, as a commit of each kind would (a stopping thread's wait: it
  // then sees its stop flag instead of waiting out its timeout).
  virtual void wake_waiters() = 0;

  // --- Outbox (queue relay, webhook dispatch) -------------------------------
  virtual std::vector<outbox_row> fetch_outbox(const std::string& kind, int32_t limit) = 0;
  virtual std::future<write_status> complete_outbox(std::vector<int64_t> ids) = 0;
  virtual std::future<write_status> retry_outbox(int64_t id, int64_t not_before_ms) = 0;

  // --- Reconciler / reaper -------------------------------------------------
  // Jobs a queue should hold: queued and not updated for grace_ms, or running with a lease
  // that expired more than grace_ms ago. Queued jobs of the batch class are not listed: the batch
  // feeder (api/batch_feeder.cpp) publishes them through its window and re-publishes its own.
  virtual std::vector<job_row> list_dispatchable(int64_t grace_ms, int32_t limit) = 0;
  // --tenant-max-running's safety net: promote held jobs of tenants with a free slot (a promotion a
  // crash or a lowered limit missed; a removed limit releases them all). Writes only when there are
  // any; the number promoted.
  virtual int32_t refill_held() = 0;
  // Unfenced failure (dead letter, deadline reaper); fenced if already terminal.
  virtual std::future<write_status> fail_job(const std::string& job_id, std::string reason,
                                             job_status status = job_status::failed) = 0;

  // --- Worker side (fenced by lease epoch) -----------------------------------
  // Claim: queued, or running with an expired lease. Bumps lease_epoch and attempts;
  // poisoned (and the job failed) when attempts would exceed max_attempts; held (nothing bumped,
  // the job stays queued, out of Redis) when its tenant is at tenant_max_running (running_limit.h).
  virtual std::future<claim_result> claim_job(const std::string& job_id, const std::string& worker_id,
                                              int64_t lease_ms, int32_t max_attempts) = 0;
  // The same, answered through done (as create_job_async: once, on the writer thread, after the
  // COMMIT is durable, or outcome error when it failed; quick, never waiting on the store). NOTE: a
  // std::promise's set_value is a futex wake even with nobody waiting (libstdc++'s call_once): the
  // worker's batch of claims waits on one latch instead (issue 29).
  virtual void claim_job_async(const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                               int32_t max_attempts, std::function<void(claim_result)> done) = 0;
  // Each job's "model" (its request's), for routing to the model's stream; ids not found are absent.
  virtual std::map<std::string, std::string> job_models(const std::vector<std::string>& job_ids) = 0;
  // An event written by the dispatch side (not a worker: no epoch), only while the job is queued.
  virtual std::future<write_status> append_queued_event(const std::string& job_id, std::string type,
                                                        std::string data_json) = 0;
  // A worker (re)starting under a stable id: every job still running under that id's lease gets
  // its epoch bumped and its lease expired, so the previous process's late writes are fenced and
  // the jobs can be claimed at once (by this worker, from its pending entries, or any other).
  // Returns those job ids.
  virtual std::future<std::vector<std::string>> fence_worker_leases(const std::string& worker_id) = 0;
  // Extend leases; returns the job ids whose lease is lost (epoch moved or job terminal).
  virtual std::future<std::vector<std::string>> renew_leases(std::vector<std::pair<std::string, int64_t>> jobs,
                                                             int64_t lease_ms) = 0;
  // Store the job's input messages as transcript rows (first claim only; idempotent).
  virtual std::future<write_status> init_transcript(const std::string& job_id, int64_t epoch,
                                                    std::vector<transcript_row> input) = 0;
  // Commit one model turn (transcript row + job usage + "turn" event). Idempotent per turn_idx.
  virtual std::future<write_status> commit_turn(const std::string& job_id, int64_t epoch, turn_commit turn) = 0;
  // init_transcript + commit_turn + finish_job, the parts present, as one write op (step_commit).
  virtual std::future<write_status> commit_step(const std::string& job_id, int64_t epoch, step_commit step) = 0;
  // The same, answered through done (as create_job_async: once, on the writer thread, after the
  // COMMIT is durable, or `error` when it failed; quick, and never waiting on the store).
  virtual void commit_step_async(const std::string& job_id, int64_t epoch, step_commit step,
                                 std::function<void(write_status)> done) = 0;
  // commit_step for each item, all in ONE write op (one transaction, one fsync for the group: a worker's
  // batch-class job ends, worker/end_batcher.h). Each item is written whole or not, in its own
  // savepoint: one fenced or failing job does not undo the others. Answers in the items' order; all
  // `error` when the transaction did not commit.
  virtual std::future<std::vector<write_status>> commit_steps(std::vector<step_item> items) = 0;
  // Record a tool's result durably (keyed by call id; a second record of the same call is a no-op).
  virtual std::future<write_status> record_tool_result(const std::string& job_id, int64_t epoch,
                                                       tool_output output, std::string name) = 0;
  // running -> requires_action with the pending calls; the lease is dropped, lease_owner kept as KV hint.
  virtual std::future<write_status> require_action(const std::string& job_id, int64_t epoch,
                                                   std::string pending_calls_json) = 0;
  // running -> terminal (completed / failed / incomplete / cancelled) + its status event (the webhook
  // dispatcher tails those; no outbox row: it was inserted and deleted per job for nothing).
  virtual std::future<write_status> finish_job(const std::string& job_id, int64_t epoch, job_status status,
                                               std::string result_json, std::string error,
                                               usage_totals usage) = 0;
  // running -> queued (graceful worker shutdown), + "publish" outbox row.
  virtual std::future<write_status> release_job(const std::string& job_id, int64_t epoch) = 0;
  // A progress event (fenced): e.g. "tool_call", "token".
  virtual std::future<write_status> append_event(const std::string& job_id, int64_t epoch, std::string type,
                                                 std::string data_json) = 0;
  // Cancelled jobs among these ids (worker cancel poll).
  virtual std::vector<std::string> cancelled_among(const std::vector<std::string>& job_ids) = 0;
  // Tool results recorded for a job, keyed by call id (crash resume).
  virtual std::vector<tool_output> read_tool_results(const std::string& job_id) = 0;

  // --- Deletion and retention (store/deletion.cpp; issue 33) ----------------------------
  // Make a terminal job a tombstone: its content (request, result, error, transcript, tool results,
  // events, timeline, webhook deliveries and attempts, outbox rows, idempotency key) is deleted; id,
  // tenant, final status and timestamps stay. ok; not_found (none, other tenant, already deleted);
  // fenced (not terminal: cancel it first).
  virtual std::future<write_status> delete_job(const std::string& job_id, const std::string& tenant = {}) = 0;
  // Tombstone these jobs (terminal ones only; others are skipped) in one write op: the number deleted,
  // -1 on a write failure. Keep batches small (a few hundred): one op is one write transaction.
  virtual std::future<int64_t> delete_jobs(std::vector<std::string> job_ids) = 0;
  // Live terminal jobs past their retention: finished before now - retention, where retention is the
  // submitting key's retention_days if set, else default_retention_ms. Oldest first, at most limit.
  virtual std::vector<std::string> list_expired(int64_t default_retention_ms, int32_t limit) = 0;
  // store:false jobs whose content may go: terminal, and their terminal webhook (if any) delivered or
  // given up. At most limit.
  virtual std::vector<std::string> list_unstored_done(int32_t limit) = 0;
  // Live jobs of a tenant, any status (deleting everything of a tenant), at most limit.
  virtual std::vector<job_row> list_tenant_jobs(const std::string& tenant, int32_t limit) = 0;
  // Give up to max_pages free pages back to the file system (incremental auto-vacuum): pages freed.
  virtual std::future<int64_t> reclaim_space(int32_t max_pages) = 0;
  // Checkpoint the WAL into the main file and truncate it; false when readers kept it from finishing.
  virtual bool checkpoint() = 0;
  virtual store_space space() = 0;
  // The store's clock (store_options::clock, else now_ms()).
  virtual int64_t now() const = 0;

  virtual store_stats stats() const = 0;
};

// The SQL of every migration compiled into this binary, in version order (1..latest).
struct migration {
  int32_t version;
  const char* name;                // "0001_init"
  const char* sql;
};
const std::vector<migration>& migrations();
// Migrate a database file up to target_version (tests: build a DB at an older version).
// false with *error on failure or if the DB is newer than target_version.
bool migrate_file(const std::string& path, int32_t target_version, std::string* error);

}  // namespace agentq::store
