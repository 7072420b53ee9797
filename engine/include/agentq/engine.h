// agentq engine — the one public header of the decode engine.
// Loads a GGUF model and runs many jobs' turns in one continuous batch, keeping
// each job's KV cache resident between turns. Knows nothing of HTTP, JSON
// libraries, SQLite or Redis: structured values cross this boundary as plain
// C++ types, JSON payloads (tool arguments, schemas) as strings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace agentq {

using token_id = int32_t;

// ---------------------------------------------------------------------------
// Configuration and model description

struct engine_config {
  std::string model_path;            // GGUF file
  // Where the forward pass and the KV blocks live: "cpu", "cuda" (= "cuda:0") or "cuda:N".
  // A CUDA device in a build without CUDA, or one that is not there, fails load() with a
  // message; there is no silent fallback to the CPU.
  std::string device = "cpu";
  int32_t n_threads = 0;             // 0 = one per hardware core (CPU device)
  // Data-parallel replicas of the model (engine/replica_set.h): each its own loop thread, scheduler
  // and KV pool (kv_budget_bytes split between them); a job's turns stay on one. <= 0 = auto: one per
  // core (2 at most) for a model too small to split its ops across threads, on the CPU with
  // n_threads <= 0; else 1.
  int32_t n_replicas = 1;
  uint64_t kv_budget_bytes = 256ull << 20;  // bytes of KV blocks in the pool
  // Element type of the stored K/V: "f16" (half the bytes: twice the tokens per budget, less to
  // read per decode step), "f32", or empty for the device's default (cpu: f16; cuda: f32, its only one).
  std::string kv_type;
  int32_t block_size = 64;           // tokens per KV block (see docs/kv_and_batching.md: longer runs per head)
  // Sliding-window layers (gemma2/3 local layers, gpt-oss's alternating ones) hold K/V only for
  // the blocks their window reaches (CPU and CUDA devices); false: every layer holds the whole context.
  bool windowed_kv = true;
  int32_t max_step_tokens = 512;     // token budget per scheduler step (decode + prefill chunks)
  int32_t max_running = 64;          // sequences in one step at most
  // While a job of priority > 0 (normal, high) is in the scheduler, priority-0 jobs' (low, batch)
  // prompt chunks get at most this many tokens of a step (decode tokens unlimited), so a CPU step
  // carrying an interactive job's prompt stays short during a batch; 0 = no limit; cuda: none.
  int32_t low_priority_step_tokens = 64;
  std::string spill_dir;             // disk tier for parked KV; empty = no disk tier
  std::string chat_family;           // override template family ("chatml", "llama3", ...); empty = detect
  bool prefix_reuse = true;          // false = re-prefill baseline (benchmarks)
  // KV retention between a job's turns (see docs/kv_and_batching.md):
  double kv_idle_ttl_s = 60.0;       // a finished turn's KV is kept this long without park()
  double kv_pin_max_wait_s = 30.0;   // park(): waits up to this stay pinned in memory (TTL 2x + 1 s)
  int32_t kv_spill_min_tokens = 64;  // longer waits: spill (spill_dir set) when at least this many tokens, else drop
  double kv_pin_relaxed_max_wait_s = 300.0;  // ...and waits up to this while at most half the pool is in use
  // A pinned wait is also written to the disk tier after this long (it stays pinned): a crash
  // or kill loses nothing that waited longer. < 0 = never.
  double kv_spill_after_s = 5.0;
  int64_t spill_budget_bytes = 0;    // size of this model's spill files at most (0 = unlimited)
  // Speculative decoding by prompt lookup (docs/speculative.md): proposals from the job's own
  // context, verified in one batched forward; the output is the same as without it.
  bool spec = true;
  int32_t spec_max_draft = 16;       // proposed tokens per sequence per step at most (a draft model: 8 at most)
  // Proposals are verified only while the step (decode tokens + proposals) stays within this
  // many tokens: under load k shrinks to nothing. 0 = the device's default (cpu 24, cuda 64).
  int32_t spec_step_tokens = 0;
  // Prompt-lookup proposals (on by default with spec); with a draft model they are tried first
  // (they cost nothing) and the draft proposes where lookup finds no match.
  bool spec_lookup = true;
  // A draft model (docs/speculative.md): a small GGUF with the same vocabulary as model_path
  // (size and token texts, checked at load) that proposes spec_max_draft tokens autoregressively
  // on the same device; the same verifier checks them. Empty = none.
  std::string draft_model_path;
  uint64_t draft_kv_budget_bytes = 64ull << 20;  // bytes of the draft's own KV blocks
};

// A KV pool's room (#28): what a worker advertises so that a control plane without the pool can
// make the engine's KV-room check ("the prompt needs more KV memory than the engine has") with
// the model header's layer count. One formula with block_pool::fits.
struct kv_room {
  int32_t block_size = 0;        // tokens per block
  int64_t n_pages = 0;           // one layer's K and V of one block each: n_blocks * n_layer unwindowed
  int32_t window = 0;            // tokens: the largest window of the windowed layers; 0 = none
  int32_t n_layer_windowed = 0;  // layers that hold only their window's blocks
  // Whether a sequence of n_tokens fits an empty pool of n_layer layers (the window's blocks
  // counted whole, as block_pool::fits does). false for an empty room.
  bool fits(int32_t n_layer, int64_t n_tokens) const;
};

struct model_desc {
  std::string name;                  // file stem
  std::string arch;                  // "llama", "qwen2"
  std::string chat_family;           // detected or configured prompt format
  std::string digest;                // identifies weights (spill keys)
  std::string device;                // "cpu", "cuda:0 (NVIDIA H200)"
  std::string kv_type;               // element type of the stored K/V: "f16", "f32"
  int64_t kv_capacity_tokens = 0;    // tokens the KV blocks hold in all (every job together)
  kv_room kv;                        // the pool's geometry (advertised to control planes); empty without a pool
  int32_t n_vocab = 0;
  int32_t n_ctx = 0;                 // trained context length (tokens)
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  token_id bos = -1, eos = -1, eot = -1;
  std::string draft;                 // the draft model's name (file stem); empty = none
  int32_t n_replicas = 1;            // data-parallel replicas (engine_config::n_replicas, resolved)
};

// ---------------------------------------------------------------------------
// Chat-level types (OpenAI-style messages; JSON stays text)

enum class role { system, user, assistant, tool };

struct tool_call {
  std::string id;                    // stable call id ("call_...")
  std::string name;
  std::string arguments_json;        // a JSON object, as text
};

struct chat_message {
  enum role role = role::user;
  std::string content;
  std::vector<tool_call> tool_calls; // assistant only
  std::string tool_call_id;          // tool only
  std::string name;                  // tool only: the function's name (some formats need it)
};

struct tool_def {
  std::string name;
  std::string description;
  std::string parameters_json;       // JSON Schema of the arguments, as text
};

enum class tool_choice_mode { automatic, none, required, named };
struct tool_choice {
  tool_choice_mode mode = tool_choice_mode::automatic;
  std::string name;                  // for named
};

struct sampling_params {
  float temperature = 0.0f;          // 0 = greedy
  int32_t top_k = 0;                 // 0 = off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;       // 1 = off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;       // window for the penalties (tokens)
  uint64_t seed = 0;
};

enum class finish_reason { stop, length, tool_calls, cancelled, error };
const char* to_string(finish_reason r);

struct turn_usage {
  int32_t n_tokens_prompt = 0;       // tokens of the whole rendered prompt this turn
  int32_t n_tokens_cached = 0;       // of those, served from resident / prefix-cached KV
  int32_t n_tokens_computed = 0;     // of those, actually prefilled
  int32_t n_tokens_generated = 0;    // sampled tokens
  // Speculation: proposed tokens the model agreed with (OpenAI's accepted_prediction_tokens)
  // and proposed tokens it did not (rejected_prediction_tokens: computed, then discarded).
  int32_t n_tokens_draft_accepted = 0;
  int32_t n_tokens_draft_rejected = 0;
  double queue_ms = 0;               // submit -> first scheduled
  double prefill_ms = 0;             // first scheduled -> first token
  double decode_ms = 0;              // first token -> done
};

// Whitespace inside constrained JSON (tool-call arguments, response_format, json_schema).
enum class json_whitespace : uint8_t {
  spaced,  // default: at most one space after ':' and ',', none elsewhere (the chat templates'
           // tojson prints ": " and ", "; xgrammar's separators with any_whitespace off)
  free,    // any whitespace, up to 16 bytes per gap (a weak model may spend its budget on it)
};

// Token-level request: what the CLI, benchmarks and the chat layer submit.
struct token_request {
  uint64_t job_key = 0;              // stable per job: KV residency and scheduling key (0 = none)
  uint64_t arrival_seq = 0;          // program-level FCFS: the job's first arrival order
  int32_t priority = 0;              // higher runs first
  std::vector<token_id> prompt;      // the whole conversation so far (cached prefix is skipped)
  int32_t max_tokens = 256;          // tokens to generate at most
  sampling_params sampling;
  std::vector<token_id> stop_tokens; // in addition to the model's EOS/EOT
  std::vector<std::string> stop;     // stop strings (not included in output)
  std::string json_schema;           // non-empty: output constrained to this JSON Schema
  json_whitespace json_ws = json_whitespace::spaced;  // whitespace the constrained JSON may use
  // Predicted Outputs: tokens the output is expected to resemble (a file being edited). Speculation
  // proposes from it as extra lookup text (it is not part of the context); it never changes the
  // output, only how fast it comes.
  std::vector<token_id> prediction;
  bool ignore_eos = false;           // EOS / EOT do not end the output (benchmarks, the CLI)
};

struct token_result {
  finish_reason finish = finish_reason::stop;
  std::vector<token_id> output_ids;
  std::string text;
  turn_usage usage;
  std::string error;
};

// Message-level request: one agent turn.
struct turn_request {
  uint64_t job_key = 0;
  uint64_t arrival_seq = 0;
  int32_t priority = 0;
  std::vector<chat_message> messages;
  std::vector<tool_def> tools;
  tool_choice choice;
  bool parallel_tool_calls = true;
  std::string response_schema_json;  // non-empty: the final answer must match this JSON Schema
  json_whitespace json_ws = json_whitespace::spaced;  // in tool-call JSON and the schema answer
  // Prefill: text the assistant's reply starts with, appended to the rendered prompt. It is
  // part of the reply: parsed (a prefix may open a tool call) and returned in the message.
  std::string assistant_prefix;
  sampling_params sampling;
  int32_t max_tokens = 256;          // per turn
  std::vector<std::string> stop;
  // Predicted Outputs (OpenAI's prediction.content): the text the reply is expected to resemble;
  // tokenized as plain text and handed to speculation as token_request::prediction.
  std::string prediction;
};

struct turn_result {
  finish_reason finish = finish_reason::stop;
  chat_message message;              // the assistant message: content and/or tool_calls
  turn_usage usage;
  std::string error;                 // finish == error, or a malformed tool call to report to the model
  std::vector<token_id> output_ids;
};

// Called on the engine thread; keep them short.
struct token_callbacks {
  std::function<void(std::string_view piece)> on_text;   // complete UTF-8 only
  std::function<void(token_result)> on_done;
};
struct turn_callbacks {
  std::function<void(std::string_view piece)> on_text;
  std::function<void(turn_result)> on_done;
};

struct engine_stats {
  int64_t n_blocks_total = 0, n_blocks_used = 0, n_blocks_free = 0;
  int64_t n_blocks_cached = 0;       // unreferenced, held by the prefix cache
  int64_t n_blocks_parked = 0;       // held by parked jobs
  int64_t n_blocks_spilled = 0;      // on the disk tier
  int64_t n_evictions = 0, n_spills = 0, n_restores = 0;
  int64_t n_early_spills = 0;        // of n_spills: pinned waits written to disk while kept in memory
  int64_t n_spill_corrupt = 0;       // spill files that failed their checksum / size check (recomputed)
  int64_t n_spill_bytes = 0;         // bytes of spill files on disk
  int64_t n_spill_budget_evictions = 0;  // files removed to stay within spill_budget_bytes
  int64_t n_tokens_prompt = 0, n_tokens_cached = 0, n_tokens_computed = 0, n_tokens_generated = 0;
  int64_t n_tokens_draft_accepted = 0, n_tokens_draft_rejected = 0;  // speculation, every finished request
  int32_t n_running = 0, n_waiting = 0;
  int32_t last_batch_tokens = 0;     // tokens in the latest step
  bool healthy = true;               // false once the device failed (see engine::healthy)
  std::string failure;               // why, when !healthy
};

// The engine moved a job's KV to the disk tier (spill: at park, TTL expiry or memory
// pressure) or read it back for a turn (restore). Reported through engine::on_kv_move.
struct kv_move_event {
  enum class kind { spill, restore };
  kind what = kind::spill;
  uint64_t job_key = 0;              // the job whose KV moved (restore: the job resuming)
  int32_t n_tokens = 0;              // tokens whose K/V moved
  int64_t n_bytes = 0;               // K/V bytes written or read
  double ms = 0;                     // wall time of the disk write / read
};

// What engine::spill_for_shutdown did.
struct kv_shutdown_report {
  int32_t n_seqs = 0;                // resident sequences now on disk (written now or earlier)
  int32_t n_written = 0;             // of those, written by this call
  int64_t n_tokens = 0;              // tokens of the n_seqs
  int64_t n_bytes = 0;               // bytes written by this call
  double ms = 0;                     // wall time of this call
  int32_t n_dropped = 0;             // worth a file but not written (time bound, budget, I/O error)
  int64_t n_tokens_dropped = 0;
  int32_t n_short = 0;               // below spill_min_tokens: recomputing them is cheap
};

// ---------------------------------------------------------------------------

class engine {
 public:
  // Load a model; nullptr with *error set (a message a user can act on) on failure.
  static std::unique_ptr<engine> load(const engine_config& config, std::string* error);
  virtual ~engine() = default;

  virtual const model_desc& model() const = 0;

  // Tokenizer. parse_special: recognise special-token text such as "<|im_start|>".
  virtual std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const = 0;
  virtual std::string detokenize(std::span<const token_id> ids) const = 0;

  // The prompt a turn would feed the model (for debugging templates).
  virtual std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const = 0;
  // Check a request up front (schema compiles, tools well-formed, prompt fits the context);
  // nullopt when fine, else a message naming what is wrong.
  virtual std::optional<std::string> validate(const turn_request& request) const = 0;

  // Submit work; thread-safe. Returns a request id for cancel(). Callbacks run on the engine thread.
  virtual uint64_t submit(token_request request, token_callbacks callbacks) = 0;
  virtual uint64_t submit(turn_request request, turn_callbacks callbacks) = 0;
  // Finish a request with finish_reason::cancelled within one step and free its KV.
  virtual void cancel(uint64_t request_id) = 0;

  // Residency: a job waits on a tool for about expected_wait_s seconds (client tools: long).
  // The engine keeps, spills or drops its KV by policy; the next turn resumes from it.
  virtual void park(uint64_t job_key, double expected_wait_s) = 0;
  // The job is over: its KV may be reclaimed (shared prefixes stay cached).
  virtual void release(uint64_t job_key) = 0;

  // Drive the engine: one scheduler step on the calling thread; false when there was nothing to do.
  virtual bool step() = 0;
  // Or let the engine run its own loop thread until stop().
  virtual void start() = 0;
  virtual void stop() = 0;

  virtual engine_stats stats() const = 0;

  // The process is going (SIGTERM, a worker's drain): write the resident KV of every parked or
  // idle job worth it to the disk tier within budget_s seconds, so a restart resumes it; what
  // does not fit in time is dropped and counted. Call after stop() (or from the stepping
  // thread). No disk tier: nothing happens.
  virtual kv_shutdown_report spill_for_shutdown(double budget_s) {
    (void)budget_s;
    return {};
  }
  // Delete spill files of jobs for which live(job_key) is false (jobs that ended while no
  // process held their KV). Returns files removed.
  virtual int32_t prune_spill(const std::function<bool(uint64_t job_key)>& live) {
    (void)live;
    return 0;
  }

  // fn runs on the engine thread after every spill and restore (keep it short; nullptr = none).
  // Thread-safe; replaces an earlier listener.
  virtual void on_kv_move(std::function<void(const kv_move_event&)> fn) { (void)fn; }

  // false once the engine is in a failed state (a sticky device error): every running and
  // later request finishes with finish_reason::error; *why (when non-null) gets the reason.
  // Readiness checks report it. Thread-safe.
  virtual bool healthy(std::string* why = nullptr) const {
    (void)why;
    return true;
  }
};

}  // namespace agentq
