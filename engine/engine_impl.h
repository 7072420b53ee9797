// The concrete agentq::engine: forward backend (CPU or CUDA: the model and its KV
// blocks) + tokenizer + paged KV (pool, prefix cache, residency, spill tier) +
// scheduler, driven one step at a time (step()) or by its own loop thread (start()).
// Private to the engine library; tests reach it through agentq_engine_internal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>

#include "agentq/engine.h"
#include "backend/backend.h"
#include "chat/chat.h"
#include "chat/tool_parser.h"
#include "gguf/reader.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv/residency.h"
#include "kv/spill.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "spec/draft_model.h"
#include "spec/ngram_proposer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "turn_check.h"

namespace agentq {

using engine_clock = std::chrono::steady_clock;

// Constrained decoding and tool-call parsing as the engine sees them. NOTE: type-erased so
// that only engine_hooks.cpp names the grammar / tool-parser implementations.
class output_constraint {
 public:
  virtual ~output_constraint() = default;
  // Allowed tokens now: bit (id % 32) of mask[id / 32]; false = unconstrained this step
  // (a tool_choice auto turn before a call opens: sampled exactly as without a constraint).
  virtual bool fill_mask(std::vector<uint32_t>& mask) = 0;
  virtual bool accept(token_id id) = 0;
  // Advance by text that is output but was not sampled (an assistant prefix); false if it does not fit.
  virtual bool accept_text(std::string_view text) = 0;
  virtual bool is_finished() const = 0;
  // The output is inside a tool call now (stop strings do not apply there).
  virtual bool in_call() const = 0;
};
class output_parser {
 public:
  virtual ~output_parser() = default;
  virtual std::string feed(std::string_view piece) = 0;     // content that may stream now
  // truncated: the output hit its token limit (a partial call opening is dropped)
  virtual chat::parse_result finish(bool truncated) const = 0;
};

// The control tokens of tok that open a tool call in `family`, with their text (engine_hooks_tools.cpp).
std::vector<std::pair<token_id, std::string>> find_call_markers(const tokenizer& tok, chat::template_family family);

// One submitted request while it runs (token- or turn-level).
struct active_request {
  uint64_t id = 0;
  token_request req;
  token_callbacks token_cb;
  turn_callbacks turn_cb;
  bool is_turn = false;
  std::unique_ptr<stream_decoder> decoder;
  std::unique_ptr<output_constraint> constraint;
  std::unique_ptr<output_parser> parser;        // turn: splits content from tool calls
  std::string prefix;                           // turn: assistant_prefix, the start of the output text
  std::string prompt_text;                      // turn: the rendered prompt (+ prefix) req.prompt encodes
  std::string text;                             // decoded output (complete UTF-8)
  size_t n_text_emitted = 0;                    // bytes of text passed on (stop strings hold some back)
  size_t max_stop_len = 0;
  std::vector<token_id> output_ids;
  std::unique_ptr<sampler> sampling;           // penalties window + seeded PRNG, per request
  std::unique_ptr<ngram_proposer> proposer;    // prompt lookup / prediction (null: off)
  bool spec_on = false;                        // speculation for this request (lookup and / or draft)
  bool draft_from_model = false;               // the pending proposal came from the draft model
  int32_t n_draft_accepted = 0, n_draft_rejected = 0;
  engine_clock::time_point t_submit, t_first_sched, t_first_token;
  bool scheduled = false, got_token = false;
};

class engine_impl final : public engine {
 public:
  static std::unique_ptr<engine> create(const engine_config& config, std::string* error);
  ~engine_impl() override;

  const model_desc& model() const override { return desc_; }
  std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const override;
  std::string detokenize(std::span<const token_id> ids) const override;
  std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const override;
  std::optional<std::string> validate(const turn_request& request) const override;

  uint64_t submit(token_request request, token_callbacks callbacks) override;
  uint64_t submit(turn_request request, turn_callbacks callbacks) override;
  void cancel(uint64_t request_id) override;
  void park(uint64_t job_key, double expected_wait_s) override;
  void release(uint64_t job_key) override;

  bool step() override;
  void start() override;
  void stop() override;
  engine_stats stats() const override;
  kv_shutdown_report spill_for_shutdown(double budget_s) override;
  int32_t prune_spill(const std::function<bool(uint64_t job_key)>& live) override;
  void on_kv_move(std::function<void(const kv_move_event&)> fn) override;
  bool healthy(std::string* why = nullptr) const override;

  // Internals for tests and benchmarks.
  const block_pool& pool() const { return *pool_; }
  const prefix_cache& cache() const { return *cache_; }
  const residency& resident() const { return *residency_; }
  const scheduler& sched() const { return *sched_; }
  forward_backend& backend() { return *backend_; }
  chat::template_family family() const { return family_; }
  void sanity() const;   // all KV / scheduler invariants (call between steps)

 private:
  engine_impl() = default;

  // Inbox: everything that crosses threads goes through here.
  struct op_submit { std::unique_ptr<active_request> ar; };
  struct op_cancel { uint64_t id; };
  struct op_park { uint64_t job_key; double wait_s; };
  struct op_release { uint64_t job_key; };
  using op = std::variant<op_submit, op_cancel, op_park, op_release>;
  void push(op o);
  bool drain_inbox();
  void admit(std::unique_ptr<active_request> ar);

  // validate(), also giving the rendered prompt and its ids (make_turn uses them).
  std::optional<std::string> validate_prompt(const turn_request& request, turn_prompt* prompt) const;
  // A turn request -> token request + a tool parser (engine_turn.cpp).
  std::unique_ptr<active_request> make_turn(turn_request request, turn_callbacks callbacks, std::string* error) const;
  void finish_turn(active_request& ar, token_result res);
  // Engine thread, at admission: a turn of a job whose KV is resident or spilled keeps those
  // token ids where their bytes spell the new prompt (tokenizer/splice.h).
  void splice_turn_prompt(active_request& ar);

  // Hooks into the grammar and tool-call modules (engine_hooks.cpp): nullptr + *error when
  // the schema / tool set cannot be compiled.
  std::unique_ptr<output_constraint> make_schema_constraint(std::string_view schema_json, json_whitespace ws, std::string* error) const;
  std::unique_ptr<output_constraint> make_tool_constraint(const turn_request& r, std::string* error) const;
  // tool_choice auto: free until a call opens, then the call's grammar (and the response schema
  // for a non-tool answer); see grammar/turn_constraint.h.
  std::unique_ptr<output_constraint> make_lazy_constraint(const turn_request& r, std::string* error) const;
  // Text of a control token that opens a tool call ([TOOL_CALLS], <|python_tag|>); nullptr for others.
  const std::string* call_marker_text(token_id id) const;
  const std::vector<std::pair<token_id, std::string>>& call_markers() const;
  std::unique_ptr<output_parser> make_parser(const turn_request& r) const;
  std::optional<std::string> check_schema(std::string_view schema_json) const;

  token_id sample(active_request& ar, float* logits);
  // Handle a sampled token: stop conditions, streaming. true when the request finished.
  // pre: the sampler and constraint already accepted tok (a verified proposal, advance()),
  // with what the constraint said then.
  struct pre_advanced {
    bool in_call = false;   // tok was call text
    bool finished = false;  // the constraint was finished after tok
  };
  bool on_token(active_request& ar, token_id tok, const sequence& seq, const pre_advanced* pre = nullptr);
  // Speculation (engine_spec.cpp): set proposals for the running decoders before schedule().
  void propose_drafts();
  // Verify item it's proposals against its logits rows: the tokens to emit (accepted
  // proposals, then one sampled token) and, for the leading ones advance()d, their state.
  void verify_draft(active_request& ar, const plan_item& it, const float* rows, std::vector<token_id>& emitted,
                    std::vector<pre_advanced>& pre);
  // Feed an accepted token to the sampler's penalty window and the constraint; returns whether it is call text.
  bool advance(active_request& ar, token_id tok);
  void emit_text(active_request& ar, size_t upto);
  void finish(uint64_t id, finish_reason reason, const std::string& error = {});
  // A sticky device error: the engine turns failed (healthy() false) and every request ends
  // with finish_reason::error; later ones fail at admission.
  void fail_device(const std::string& why);
  double now_s() const;
  void update_stats(int32_t last_batch_tokens);
  void loop();

  engine_config config_;
  model_desc desc_;
  std::shared_ptr<const gguf::file> file_;
  std::unique_ptr<forward_backend> backend_;
  std::unique_ptr<tokenizer> tok_;
  std::unique_ptr<draft_model> draft_;         // config_.draft_model_path (null: none)
  chat::template_family family_ = chat::template_family::plain;
  bool family_known_ = true;  // false: the template matched no family (desc_.chat_family "unknown")
  mutable std::shared_ptr<const void> vocab_index_;  // grammar::vocab_index, built on first use (engine_hooks.cpp)
  mutable std::mutex vocab_mutex_;
  // Control tokens that open a tool call in this family, with their text (their pieces are "").
  mutable std::vector<std::pair<token_id, std::string>> call_markers_;   // built once (engine_hooks_tools.cpp)
  mutable std::once_flag call_markers_once_;
  std::unique_ptr<block_pool> pool_;
  std::unique_ptr<prefix_cache> cache_;
  std::unique_ptr<spill_store> spill_;
  std::unique_ptr<residency> residency_;
  std::unique_ptr<scheduler> sched_;
  engine_clock::time_point t0_ = engine_clock::now();

  std::map<uint64_t, std::unique_ptr<active_request>> active_;
  std::map<uint64_t, double> pending_park_;     // job -> wait, applied when its turn ends
  std::vector<float> logits_;

  // counters (engine thread)
  int64_t n_tokens_prompt_ = 0, n_tokens_cached_ = 0, n_tokens_computed_ = 0, n_tokens_generated_ = 0;
  int64_t n_tokens_draft_accepted_ = 0, n_tokens_draft_rejected_ = 0;

  mutable std::mutex inbox_mutex_;
  std::deque<op> inbox_;
  uint64_t next_id_ = 1;
  std::condition_variable cv_;
  std::mutex step_mutex_;
  std::mutex kv_move_mutex_;
  std::function<void(const kv_move_event&)> kv_move_fn_;  // guarded by kv_move_mutex_
  mutable std::mutex stats_mutex_;
  engine_stats stats_;
  std::string failure_;    // guarded by stats_mutex_; non-empty = failed state
  bool failed_ = false;    // engine thread's copy of the failed state
  std::string failure_reason_;
  std::thread thread_;
  bool running_ = false;   // guarded by inbox_mutex_
};

}  // namespace agentq
