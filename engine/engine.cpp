// agentq::engine: load, submit/cancel/park/release through a locked inbox, and the
// step: schedule -> forward -> sample -> update -> stream / finish.
#include "engine_impl.h"
#include "replica_set.h"
#include <agentq/thread_class.h>

#include <pthread.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace agentq {

const char* to_string(finish_reason r) {
  switch (r) {
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::tool_calls: return "tool_calls";
    case finish_reason::cancelled: return "cancelled";
    case finish_reason::error: return "error";
  }
  return "unknown";
}

std::unique_ptr<engine> engine::load(const engine_config& config, std::string* error) {
  const int32_t n = resolve_replicas(config, int32_t(std::thread::hardware_concurrency()));
  if (n > 1) return load_replica_set(config, n, error);
  return engine_impl::create(config, error);
}

namespace {
// Identifies the weights: file size, tensor table and samples of the tensor data.
std::string model_digest(const gguf::file& f) {
  uint64_t h = checksum64(nullptr, 0);
  const uint64_t size = f.size();
  h = checksum64(&size, sizeof size, h);
  for (const auto& t : f.tensors()) {
    h = checksum64(t.name.data(), t.name.size(), h);
    h = checksum64(&t.offset, sizeof t.offset, h);
    if (t.data && t.n_bytes) h = checksum64(t.data, std::min<uint64_t>(t.n_bytes, 4096), h);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

std::unique_ptr<engine> engine_impl::create(const engine_config& config, std::string* error) {
  std::string err;
  auto set_err = [&](const std::string& e) {
    if (error) *error = e;
    return nullptr;
  };
  if (config.block_size <= 0 || config.max_step_tokens <= 0 || config.max_running <= 0)
    return set_err("block_size, max_step_tokens and max_running must be positive");
  device_spec spec;
  if (!parse_device(config.device, &spec, &err)) return set_err(err);
  kv_dtype kv_type = kv_dtype::f32;
  if (!config.kv_type.empty() && !parse_kv_dtype(config.kv_type, &kv_type))
    return set_err("unknown kv_type '" + config.kv_type + "' (expected f16 or f32)");
  std::shared_ptr<const gguf::file> file = gguf::file::open(config.model_path, &err);
  if (!file) return set_err("cannot load model '" + config.model_path + "': " + err);
  std::unique_ptr<engine_impl> e(new engine_impl());
  e->config_ = config;
  e->file_ = file;
  // NOTE: never falls back to the CPU: a job that asked for the GPU should not silently run 50x slower.
  e->backend_ = forward_backend::create(config.device, file, config.n_threads, &err);
  if (!e->backend_) return set_err("cannot load model '" + config.model_path + "': " + err);
  if (!config.kv_type.empty() && !e->backend_->set_kv_type(kv_type, &err)) return set_err(err);
  e->backend_->set_windowed_kv(config.windowed_kv);  // NOTE: a device without it holds every layer whole
  e->tok_ = tokenizer::load(*file, &err);
  if (!e->tok_) return set_err("cannot load the tokenizer of '" + config.model_path + "': " + err);

  const auto& hp = e->backend_->hparams();
  auto& d = e->desc_;
  d.name = std::filesystem::path(config.model_path).stem().string();
  d.arch = hp.arch;
  d.digest = model_digest(*file);
  d.device = e->backend_->device();
  d.n_vocab = hp.n_vocab;
  d.n_ctx = hp.n_ctx;
  d.n_embd = hp.n_embd;
  d.n_layer = hp.n_layer;
  d.n_head = hp.n_head;
  d.n_head_kv = hp.n_head_kv;
  d.bos = e->tok_->bos();
  d.eos = e->tok_->eos();
  d.eot = e->tok_->eot();
  // NOTE: loaded only with speculation on (a draft that never proposes would only cost memory);
  // a vocabulary that differs from the target's fails the load with both sizes / hashes. A draft
  // proposes at most 8 a step whatever spec_max_draft: each of its tokens is a draft forward, paid
  // whether accepted or not (lookup's proposals are free, so their cap is higher).
  if (config.spec && !config.draft_model_path.empty()) {
    e->draft_ = draft_model::load(config.draft_model_path, config.device, config.n_threads, *e->tok_, hp.n_vocab,
                                  config.draft_kv_budget_bytes, config.block_size, std::min(config.spec_max_draft, 8), &err);
    if (!e->draft_) return set_err(err);
    d.draft = e->draft_->name();
  }
  if (!config.chat_family.empty()) {
    auto fam = chat::family_from_name(config.chat_family);
    if (!fam) return set_err("unknown chat_family '" + config.chat_family + "'");
    e->family_ = *fam;
  } else {
    // NOTE: an unrecognised template renders as plain (non-tool jobs still run) but is
    // reported as "unknown": the API refuses tool jobs for it and the daemon logs it.
    auto fam = chat::detect_family(file->get_string("tokenizer.chat_template").value_or(""));
    e->family_ = fam.value_or(chat::template_family::plain);
    e->family_known_ = fam.has_value();
  }
  d.chat_family = e->family_known_ ? chat::to_string(e->family_) : chat::unknown_family_name;

  const kv_layout layout = e->backend_->kv_layout_for(config.block_size);
  if (!e->backend_->alloc_kv(config.block_size, block_pool::blocks_for_budget(layout, config.kv_budget_bytes), &err))
    return set_err("device '" + config.device + "': " + err);
  // The pool's blocks are the backend's (host or device) memory: copy-on-write and spill go through it.
  e->pool_ = std::make_unique<block_pool>(e->backend_->kv());
  d.kv_type = kv_dtype_name(layout.dtype);
  d.kv_capacity_tokens = int64_t(e->pool_->n_blocks_total()) * layout.block_size;
  d.kv = e->pool_->room();
  e->cache_ = std::make_unique<prefix_cache>(*e->pool_);
  if (!config.spill_dir.empty())
    e->spill_ = std::make_unique<spill_store>(config.spill_dir, d.digest, layout, config.spill_budget_bytes);
  residency_config rc;
  rc.idle_ttl_s = config.kv_idle_ttl_s;
  rc.pin_max_wait_s = config.kv_pin_max_wait_s;
  rc.pin_relaxed_max_wait_s = std::max(config.kv_pin_relaxed_max_wait_s, config.kv_pin_max_wait_s);
  rc.spill_min_tokens = config.kv_spill_min_tokens;
  rc.spill_after_s = config.kv_spill_after_s;
  e->residency_ = std::make_unique<residency>(*e->pool_, e->spill_.get(), rc);
  e->residency_->on_move = [raw = e.get()](const kv_move_event& ev) {
    std::function<void(const kv_move_event&)> fn;
    {
      std::lock_guard lock(raw->kv_move_mutex_);
      fn = raw->kv_move_fn_;
    }
    if (fn) fn(ev);
  };
  sched_config sc;
  sc.max_step_tokens = config.max_step_tokens;
  sc.max_running = config.max_running;
  // NOTE: on CUDA a step of 512 tokens costs about what one of 64 does (a far wider flat region,
  // as for spec_step_tokens below), so limiting batch prefill there would cost batch throughput
  // and buy an interactive job little.
  sc.low_priority_step_tokens = spec.kind == device_spec::cuda ? 0 : config.low_priority_step_tokens;
  sc.prefix_reuse = config.prefix_reuse;
  sc.n_ctx = d.n_ctx;
  // NOTE: on the CPU a step of a few tokens costs about what one token does (the weights are read
  // once); past that, verification tokens cost compute that decode tokens need, but a well-accepted
  // proposal still costs a fraction of a decode step per token (Q4_K 110M: ~0.35 of one at 16-24
  // positions) and a step's fixed part (attention's K/V pass, fork-joins) is paid once: 24 (the
  // pair kernels' one-block limit, k_few_pair) let a lone sequence verify 16 at a time (8 until
  // session 20). CUDA's flat region is far wider.
  sc.spec_step_tokens = config.spec_step_tokens > 0 ? config.spec_step_tokens : spec.kind == device_spec::cuda ? 64 : 24;
  e->sched_ = std::make_unique<scheduler>(*e->pool_, *e->cache_, e->residency_.get(), sc);
  e->update_stats(0);
  return e;
}

engine_impl::~engine_impl() {
  stop();
  // NOTE: the scheduler and residency hand their blocks back to the pool: destroy them first.
  sched_.reset();
  residency_.reset();
}

std::vector<token_id> engine_impl::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return tok_->encode(text, add_special, parse_special);
}

std::string engine_impl::detokenize(std::span<const token_id> ids) const { return tok_->decode(ids); }

double engine_impl::now_s() const { return std::chrono::duration<double>(engine_clock::now() - t0_).count(); }

// --- inbox ------------------------------------------------------------------

void engine_impl::push(op o) {
  {
    std::lock_guard lk(inbox_mutex_);
    inbox_.push_back(std::move(o));
  }
  cv_.notify_one();
}

uint64_t engine_impl::submit(token_request request, token_callbacks callbacks) {
  auto ar = std::make_unique<active_request>();
  {
    std::lock_guard lk(inbox_mutex_);
    ar->id = next_id_++;
  }
  ar->t_submit = engine_clock::now();
  ar->req = std::move(request);
  ar->token_cb = std::move(callbacks);
  const uint64_t id = ar->id;
  push(op_submit{std::move(ar)});
  return id;
}

uint64_t engine_impl::submit(turn_request request, turn_callbacks callbacks) {
  std::string err;
  auto ar = make_turn(std::move(request), callbacks, &err);
  if (!ar) {
    // NOTE: reported on the engine thread like every other completion.
    ar = std::make_unique<active_request>();
    ar->is_turn = true;
    ar->turn_cb = std::move(callbacks);
    ar->req.max_tokens = -1;  // marks "failed before admission"
    ar->text = err;
  }
  {
    std::lock_guard lk(inbox_mutex_);
    ar->id = next_id_++;
  }
  ar->t_submit = engine_clock::now();
  const uint64_t id = ar->id;
  push(op_submit{std::move(ar)});
  return id;
}

void engine_impl::cancel(uint64_t request_id) { push(op_cancel{request_id}); }
void engine_impl::on_kv_move(std::function<void(const kv_move_event&)> fn) {
  std::lock_guard lock(kv_move_mutex_);
  kv_move_fn_ = std::move(fn);
}
void engine_impl::park(uint64_t job_key, double expected_wait_s) { push(op_park{job_key, expected_wait_s}); }
void engine_impl::release(uint64_t job_key) { push(op_release{job_key}); }

bool engine_impl::drain_inbox() {
  std::deque<op> ops;
  {
    std::lock_guard lk(inbox_mutex_);
    ops.swap(inbox_);
  }
  for (auto& o : ops) {
    if (auto* s = std::get_if<op_submit>(&o)) {
      admit(std::move(s->ar));
    } else if (auto* c = std::get_if<op_cancel>(&o)) {
      if (active_.count(c->id)) finish(c->id, finish_reason::cancelled);
    } else if (auto* p = std::get_if<op_park>(&o)) {
      bool busy = false;
      for (auto& [id, ar] : active_) busy |= ar->req.job_key == p->job_key;
      if (busy) pending_park_[p->job_key] = p->wait_s;
      else residency_->park(p->job_key, p->wait_s, now_s());
    } else if (auto* r = std::get_if<op_release>(&o)) {
      pending_park_.erase(r->job_key);
      residency_->release(r->job_key);
    }
  }
  return !ops.empty();
}

void engine_impl::admit(std::unique_ptr<active_request> ar) {
  const uint64_t id = ar->id;
  auto fail = [&](const std::string& msg) {
    active_.emplace(id, std::move(ar));
    finish(id, finish_reason::error, msg);
  };
  if (failed_) return fail("the engine has failed (" + desc_.device + "): " + failure_reason_);
  if (ar->is_turn && ar->req.max_tokens < 0) return fail(ar->text.empty() ? "invalid request" : std::string(ar->text));
  ar->text = ar->prefix;   // NOTE: the field carried the error message until here
  const auto& r = ar->req;
  for (token_id t : r.prompt)
    if (t < 0 || t >= desc_.n_vocab) return fail("prompt token " + std::to_string(t) + " is out of the vocabulary");
  if (r.max_tokens < 0) return fail("max_tokens must be >= 0");
  if (!r.json_schema.empty() && !ar->constraint) {
    std::string err;
    ar->constraint = make_schema_constraint(r.json_schema, r.json_ws, &err);
    if (!ar->constraint) return fail("json_schema: " + err);
  }
  for (auto& [oid, other] : active_)
    if (r.job_key != 0 && other->req.job_key == r.job_key)
      return fail("job " + std::to_string(r.job_key) + " already has a turn running");
  if (ar->is_turn) splice_turn_prompt(*ar);
  seq_request sr;
  sr.id = id;
  sr.job_key = r.job_key;
  sr.arrival_seq = r.arrival_seq;
  sr.priority = r.priority;
  sr.prompt = r.prompt;
  if (auto err = sched_->add(std::move(sr))) return fail(*err);
  ar->decoder = std::make_unique<stream_decoder>(*tok_);
  for (const auto& s : r.stop) ar->max_stop_len = std::max(ar->max_stop_len, s.size());
  ar->sampling = std::make_unique<sampler>(r.sampling);
  if (config_.spec && config_.spec_max_draft > 0) {
    ar->spec_on = true;
    if (config_.spec_lookup || !r.prediction.empty()) {
      spec_params sp;
      sp.k_max = config_.spec_max_draft;
      sp.context = config_.spec_lookup;
      ar->proposer = std::make_unique<ngram_proposer>(sp, r.prediction);
    }
  }
  // NOTE: the prompt's tail is in the penalty window, as llama.cpp does
  const size_t n_last = size_t(std::max(0, r.sampling.penalty_last_n));
  for (size_t i = r.prompt.size() > n_last ? r.prompt.size() - n_last : 0; i < r.prompt.size(); ++i)
    ar->sampling->accept(r.prompt[i]);
  active_.emplace(id, std::move(ar));
}

// --- the step -----------------------------------------------------------------

bool engine_impl::step() {
  std::lock_guard step_lk(step_mutex_);
  bool did = drain_inbox();
  if (!failed_) {
    // a copy-on-write / spill / restore between steps may have hit the sticky error
    const std::string why = backend_->failure();
    if (!why.empty()) fail_device(why);
  }
  if (failed_) {
    did = !active_.empty() || did;
    fail_device(failure_reason_);  // requests admitted since (none: admit fails them) or left over
    update_stats(0);
    return did;
  }
  residency_->expire(now_s());
  propose_drafts();
  step_plan plan = sched_->schedule();
  for (uint64_t id : plan.out_of_memory) {
    finish(id, finish_reason::length);
    did = true;
  }
  if (plan.empty()) {
    update_stats(0);
    return did;
  }
  const auto now = engine_clock::now();
  std::vector<batch_seq> batch(plan.items.size());
  std::vector<size_t> row0(plan.items.size());   // item i's first logits row
  size_t n_rows = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const auto& it = plan.items[i];
    batch[i].block_table = it.block_table;
    batch[i].n_past = it.n_past;
    batch[i].tokens = it.tokens;
    batch[i].n_tokens = it.n_tokens;
    batch[i].all_logits = it.n_draft > 0;   // a verify item: a row per position
    row0[i] = n_rows;
    n_rows += it.n_draft > 0 ? size_t(it.n_tokens) : 1;
    auto& ar = *active_.at(it.id);
    if (!ar.scheduled) {
      ar.scheduled = true;
      ar.t_first_sched = now;
    }
  }
  const size_t n_vocab = size_t(desc_.n_vocab);
  float* logits = backend_->logits_buffer(n_rows * n_vocab);
  if (!logits) {
    logits_.resize(n_rows * n_vocab);
    logits = logits_.data();
  }
  if (backend_->forward(batch, logits) < 0) {
    const std::string why = backend_->failure();
    if (!why.empty()) {
      fail_device(why);
    } else {
      // Not sticky (e.g. no device memory for this batch's scratch): only this batch fails.
      for (const auto& it : plan.items)
        finish(it.id, finish_reason::error, "the forward pass on " + desc_.device + " failed (see the log)");
    }
    update_stats(0);
    return true;
  }

  std::vector<token_id> sampled(plan.items.size(), -1);
  std::vector<int32_t> n_accepted(plan.items.size(), 0);
  std::vector<std::vector<token_id>> emitted(plan.items.size());
  std::vector<std::vector<pre_advanced>> pre(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const auto& it = plan.items[i];
    if (!it.sample) continue;
    active_request& ar = *active_.at(it.id);
    if (it.n_draft > 0) {
      verify_draft(ar, it, logits + row0[i] * n_vocab, emitted[i], pre[i]);
      sampled[i] = emitted[i].back();
      n_accepted[i] = int32_t(emitted[i].size()) - 1;
    } else {
      sampled[i] = sample(ar, logits + row0[i] * n_vocab);
      emitted[i].assign(1, sampled[i]);
    }
  }
  sched_->update(plan, sampled, n_accepted);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const auto& it = plan.items[i];
    if (!it.sample) continue;
    for (size_t k = 0; k < emitted[i].size(); ++k) {
      auto found = active_.find(it.id);
      if (found == active_.end()) break;   // finished by an earlier token of this step
      on_token(*found->second, emitted[i][k], *sched_->find(it.id), k < pre[i].size() ? &pre[i][k] : nullptr);
    }
  }
  update_stats(plan.n_tokens);
  return true;
}

token_id engine_impl::sample(active_request& ar, float* logits) {
  std::vector<uint32_t> mask;
  if (!ar.constraint || !ar.constraint->fill_mask(mask)) return ar.sampling->sample(logits, desc_.n_vocab);
  return ar.sampling->sample(logits, desc_.n_vocab, mask);
}

void engine_impl::emit_text(active_request& ar, size_t upto) {
  // never split a UTF-8 character
  while (upto > ar.n_text_emitted && upto < ar.text.size() && (uint8_t(ar.text[upto]) & 0xC0) == 0x80) --upto;
  if (upto <= ar.n_text_emitted) return;
  std::string_view piece(ar.text.data() + ar.n_text_emitted, upto - ar.n_text_emitted);
  ar.n_text_emitted = upto;
  if (ar.is_turn) {
    if (ar.parser) {
      const std::string content = ar.parser->feed(piece);
      if (!content.empty() && ar.turn_cb.on_text) ar.turn_cb.on_text(content);
    } else if (ar.turn_cb.on_text) {
      ar.turn_cb.on_text(piece);
    }
  } else if (ar.token_cb.on_text) {
    ar.token_cb.on_text(piece);
  }
}

bool engine_impl::on_token(active_request& ar, token_id tok, const sequence& seq, const pre_advanced* pre) {
  if (!ar.got_token) {
    ar.got_token = true;
    ar.t_first_token = engine_clock::now();
  }
  const auto& r = ar.req;
  if (tok < 0) {  // the constraint allows nothing more
    finish(ar.id, finish_reason::stop);
    return true;
  }
  if (!pre) ar.sampling->accept(tok);
  const bool eog = (!r.ignore_eos && tok_->is_eog(tok)) || std::find(r.stop_tokens.begin(), r.stop_tokens.end(), tok) != r.stop_tokens.end();
  if (eog) {
    finish(ar.id, finish_reason::stop);
    return true;
  }
  ar.output_ids.push_back(tok);
  // A token is call text if a tool call was open before it or is open after it.
  bool in_call = false;
  if (pre) {
    in_call = pre->in_call;
  } else {
    in_call = ar.constraint && ar.constraint->in_call();
    if (ar.constraint) ar.constraint->accept(tok);
    in_call = in_call || (ar.constraint && ar.constraint->in_call());
  }
  const size_t before = ar.text.size();
  ar.text += ar.decoder->push(tok);
  // NOTE: the tool-call parser must see a control-token opening ([TOOL_CALLS]); it strips it from content.
  if (ar.parser)
    if (const std::string* m = call_marker_text(tok)) ar.text += *m;
  // stop strings: search the new text (and the tail that may complete a match)
  if (ar.max_stop_len > 0) {
    const size_t from = before >= ar.max_stop_len ? before - ar.max_stop_len + 1 : 0;
    size_t hit = std::string::npos;
    // NOTE: stop strings do not cut a tool call (a "." stop would break "3.5"): its grammar ends it.
    for (const auto& s : r.stop) {
      if (s.empty() || in_call) continue;
      const size_t p = ar.text.find(s, from);
      if (p != std::string::npos && p < hit) hit = p;
    }
    if (hit != std::string::npos) {
      ar.text.resize(hit);
      ar.decoder->reset();
      finish(ar.id, finish_reason::stop);
      return true;
    }
    const size_t hold = ar.max_stop_len - 1;
    if (ar.text.size() > hold) emit_text(ar, ar.text.size() - hold);
  } else {
    emit_text(ar, ar.text.size());
  }
  if (pre ? pre->finished : ar.constraint && ar.constraint->is_finished()) {
    finish(ar.id, finish_reason::stop);
    return true;
  }
  if (int32_t(ar.output_ids.size()) >= r.max_tokens) {
    finish(ar.id, finish_reason::length);
    return true;
  }
  if (desc_.n_ctx > 0 && int32_t(seq.tokens.size()) >= desc_.n_ctx) {
    finish(ar.id, finish_reason::length);
    return true;
  }
  return false;
}

void engine_impl::finish(uint64_t id, finish_reason reason, const std::string& error) {
  auto found = active_.find(id);
  if (found == active_.end()) return;
  std::unique_ptr<active_request> owned = std::move(found->second);
  active_.erase(found);
  active_request& ar = *owned;
  token_result res;
  res.finish = reason;
  res.error = error;
  if (ar.decoder) ar.text += ar.decoder->flush();
  if (reason != finish_reason::error) emit_text(ar, ar.text.size());
  res.output_ids = std::move(ar.output_ids);
  res.text = ar.text;
  const auto now = engine_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (const sequence* s = sched_->find(id)) {
    res.usage.n_tokens_prompt = s->n_prompt;
    res.usage.n_tokens_cached = s->n_tokens_cached;
    res.usage.n_tokens_computed = s->n_tokens_computed;
    res.usage.n_tokens_generated = int32_t(res.output_ids.size());
    n_tokens_prompt_ += s->n_prompt;
    n_tokens_cached_ += s->n_tokens_cached;
    n_tokens_computed_ += s->n_tokens_computed;
    n_tokens_generated_ += int32_t(res.output_ids.size());
    res.usage.n_tokens_draft_accepted = ar.n_draft_accepted;
    res.usage.n_tokens_draft_rejected = ar.n_draft_rejected;
    n_tokens_draft_accepted_ += ar.n_draft_accepted;
    n_tokens_draft_rejected_ += ar.n_draft_rejected;
    // NOTE: a cancelled or failed turn's KV is freed; a finished one stays resident for the job.
    const bool keep = reason != finish_reason::cancelled && reason != finish_reason::error;
    sched_->finish(id, keep, now_s());
  }
  if (draft_) draft_->release(id);
  if (ar.scheduled) {
    res.usage.queue_ms = ms(ar.t_submit, ar.t_first_sched);
    const auto t_first = ar.got_token ? ar.t_first_token : now;
    res.usage.prefill_ms = ms(ar.t_first_sched, t_first);
    res.usage.decode_ms = ms(t_first, now);
  } else {
    res.usage.queue_ms = ms(ar.t_submit, now);
  }
  if (ar.req.job_key != 0) {
    auto pp = pending_park_.find(ar.req.job_key);
    if (pp != pending_park_.end()) {
      residency_->park(ar.req.job_key, pp->second, now_s());
      pending_park_.erase(pp);
    }
  }
  if (ar.is_turn) {
    finish_turn(ar, std::move(res));
  } else if (ar.token_cb.on_done) {
    ar.token_cb.on_done(std::move(res));
  }
}

void engine_impl::fail_device(const std::string& why) {
  if (!failed_) {
    failed_ = true;
    failure_reason_ = why;
    std::fprintf(stderr, "agentq engine: device %s failed: %s; every request now ends with an error\n",
                 desc_.device.c_str(), why.c_str());
    std::lock_guard lk(stats_mutex_);
    failure_ = why;
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, ar] : active_) ids.push_back(id);
  for (uint64_t id : ids) finish(id, finish_reason::error, "the engine failed (" + desc_.device + "): " + why);
}

bool engine_impl::healthy(std::string* why) const {
  std::lock_guard lk(stats_mutex_);
  if (why) *why = failure_;
  return failure_.empty();
}

// --- loop and stats -----------------------------------------------------------

void engine_impl::loop() {
  for (;;) {
    {
      std::unique_lock lk(inbox_mutex_);
      if (!running_) return;
    }
    if (step()) continue;
    std::unique_lock lk(inbox_mutex_);
    // NOTE: wakes now and then even when idle: parked jobs' TTLs expire by the clock.
    cv_.wait_for(lk, std::chrono::milliseconds(100), [this] { return !running_ || !inbox_.empty(); });
  }
}

void engine_impl::start() {
  std::lock_guard lk(inbox_mutex_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] {
    util::name_thread("aq-engine", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
    loop();
  });
}

void engine_impl::stop() {
  {
    std::lock_guard lk(inbox_mutex_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void engine_impl::update_stats(int32_t last_batch_tokens) {
  engine_stats s;
  s.n_blocks_total = pool_->n_blocks_total();
  s.n_blocks_free = pool_->n_blocks_free();
  s.n_blocks_used = pool_->n_blocks_used();
  s.n_blocks_cached = cache_->n_unreferenced();
  s.n_blocks_parked = residency_->n_blocks_parked();
  s.n_blocks_spilled = spill_ ? spill_->n_blocks_on_disk() : 0;
  s.n_evictions = cache_->n_evictions() + residency_->counters().n_reclaimed;
  s.n_spills = residency_->counters().n_spills;
  s.n_restores = residency_->counters().n_restores;
  s.n_early_spills = residency_->counters().n_early_spills;
  if (spill_) {
    s.n_spill_corrupt = spill_->n_corrupt();
    s.n_spill_bytes = spill_->n_bytes_on_disk();
    s.n_spill_budget_evictions = spill_->n_budget_evictions();
  }
  s.n_tokens_prompt = n_tokens_prompt_;
  s.n_tokens_cached = n_tokens_cached_;
  s.n_tokens_computed = n_tokens_computed_;
  s.n_tokens_generated = n_tokens_generated_;
  s.n_tokens_draft_accepted = n_tokens_draft_accepted_;
  s.n_tokens_draft_rejected = n_tokens_draft_rejected_;
  s.n_running = sched_->n_running();
  s.n_waiting = sched_->n_waiting();
  s.last_batch_tokens = last_batch_tokens;
  std::lock_guard lk(stats_mutex_);
  s.healthy = failure_.empty();
  s.failure = failure_;
  stats_ = s;
}

kv_shutdown_report engine_impl::spill_for_shutdown(double budget_s) {
  std::lock_guard step_lk(step_mutex_);
  drain_inbox();  // parks sent just before the stop still apply
  kv_shutdown_report rep = residency_->shutdown_spill(budget_s);
  update_stats(0);
  return rep;
}

int32_t engine_impl::prune_spill(const std::function<bool(uint64_t job_key)>& live) {
  std::lock_guard step_lk(step_mutex_);
  const int32_t n = spill_ ? spill_->prune(live) : 0;
  update_stats(0);
  return n;
}

engine_stats engine_impl::stats() const {
  std::lock_guard lk(stats_mutex_);
  return stats_;
}

void engine_impl::sanity() const { sched_->sanity(); }

}  // namespace agentq
