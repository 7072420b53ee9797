// Draft-model proposals: per-sequence draft KV that follows the accepted tokens, batched greedy
// decoding of k tokens, adaptive k with back-off (docs/speculative.md "Draft model").
#include "spec/draft_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "gguf/reader.h"
#include "kv/block_pool.h"
#include "kv/spill.h"

namespace agentq {

uint64_t vocab_hash(const tokenizer& tok) {
  const int32_t n = tok.n_vocab();
  uint64_t h = checksum64(&n, sizeof n);
  for (token_id id = 0; id < n; ++id) {
    const std::string& t = tok.token_text(id);
    const uint64_t len = t.size();
    h = checksum64(&len, sizeof len, h);
    h = checksum64(t.data(), t.size(), h);
  }
  return h;
}

std::unique_ptr<draft_model> draft_model::load(const std::string& path, const std::string& device, int32_t n_threads,
                                               const tokenizer& target_tok, int32_t target_n_vocab,
                                               uint64_t kv_budget_bytes, int32_t block_size, int32_t k_max,
                                               std::string* error) {
  std::string err;
  auto fail = [&](const std::string& msg) {
    if (error) *error = "draft model '" + path + "': " + msg;
    return nullptr;
  };
  std::shared_ptr<const gguf::file> file = gguf::file::open(path, &err);
  if (!file) return fail(err);
  auto tok = tokenizer::load(*file, &err);
  if (!tok) return fail("its tokenizer: " + err);
  // NOTE: proposals are token ids the target verifies: the same id must mean the same text.
  if (tok->n_vocab() != target_tok.n_vocab())
    return fail("its vocabulary has " + std::to_string(tok->n_vocab()) + " tokens, the target's " +
                std::to_string(target_tok.n_vocab()) + " (a draft must share the target's vocabulary)");
  const uint64_t h_draft = vocab_hash(*tok), h_target = vocab_hash(target_tok);
  if (h_draft != h_target) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%016llx vs the target's %016llx", static_cast<unsigned long long>(h_draft),
                  static_cast<unsigned long long>(h_target));
    return fail("its token texts differ from the target's (vocabulary hash " + std::string(buf) +
                "; a draft must share the target's vocabulary)");
  }
  std::unique_ptr<draft_model> d(new draft_model());
  d->backend_ = forward_backend::create(device, file, n_threads, &err);
  if (!d->backend_) return fail(err);
  if (d->backend_->hparams().n_vocab != target_n_vocab)
    return fail("its output layer has " + std::to_string(d->backend_->hparams().n_vocab) + " rows, the target's " +
                std::to_string(target_n_vocab));
  const kv_layout layout = d->backend_->kv_layout_for(block_size);
  const int32_t n_blocks = block_pool::blocks_for_budget(layout, kv_budget_bytes);
  if (!d->backend_->alloc_kv(block_size, n_blocks, &err)) return fail(err);
  d->name_ = std::filesystem::path(path).stem().string();
  d->block_size_ = block_size;
  d->k_max_ = std::max(1, k_max);
  d->free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) d->free_.push_back(b);
  return d;
}

bool draft_model::take_turn(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.n_cooldown == 0) return true;
  --it->second.n_cooldown;
  return false;
}

bool draft_model::reserve(seq& s, int32_t n_tokens, uint64_t round) {
  const size_t need = size_t((n_tokens + block_size_ - 1) / block_size_);
  while (s.blocks.size() < need) {
    if (free_.empty()) {
      // evict the least recently used sequence that is not part of this round
      auto victim = seqs_.end();
      for (auto it = seqs_.begin(); it != seqs_.end(); ++it)
        if (it->second.last_use < round && !it->second.blocks.empty() &&
            (victim == seqs_.end() || it->second.last_use < victim->second.last_use))
          victim = it;
      if (victim == seqs_.end()) return false;
      free_.insert(free_.end(), victim->second.blocks.begin(), victim->second.blocks.end());
      victim->second.blocks.clear();
      victim->second.tokens.clear();
    }
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

namespace {
token_id argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}
}  // namespace

bool draft_model::propose(std::span<job> jobs) {
  ++round_;
  struct work {
    job* j;
    seq* s;
    int32_t n_done;  // tokens of ctx the draft's KV holds
    int32_t k;       // tokens to propose
  };
  std::vector<work> ws;
  const int32_t n_ctx = hparams().n_ctx, n_vocab = hparams().n_vocab;
  for (auto& j : jobs) {
    j.out->clear();
    seq& s = seqs_[j.id];
    s.last_use = round_;
    if (s.k == 0) s.k = k_max_;
    const int32_t len = int32_t(j.ctx.size());
    int32_t k = std::min(s.k, j.cap);
    if (n_ctx > 0) k = std::min(k, n_ctx - len);
    if (k <= 0 || len == 0) continue;
    // Roll back to the longest common prefix (a rejected proposal's K/V is forgotten); the last
    // token is always computed: its logits give the first proposal.
    const size_t n_common = size_t(std::mismatch(s.tokens.begin(), s.tokens.end(), j.ctx.begin(), j.ctx.end()).first -
                                   s.tokens.begin());
    s.tokens.resize(std::min(n_common, size_t(len - 1)));
    if (!reserve(s, len + k - 1, round_)) continue;
    ws.push_back({&j, &s, int32_t(s.tokens.size()), k});
  }
  if (ws.empty()) return true;

  // Catch up: chunks of up to 512 tokens per sequence, every sequence in the same forward.
  constexpr int32_t k_chunk = 512;
  std::vector<batch_seq> batch;
  std::vector<size_t> owner;
  for (;;) {
    batch.clear();
    owner.clear();
    for (size_t i = 0; i < ws.size(); ++i) {
      const int32_t len = int32_t(ws[i].j->ctx.size());
      if (ws[i].n_done >= len) continue;
      const int32_t n = std::min(k_chunk, len - ws[i].n_done);
      batch.push_back({ws[i].s->blocks.data(), ws[i].n_done, ws[i].j->ctx.data() + ws[i].n_done, n, false});
      owner.push_back(i);
    }
    if (batch.empty()) break;
    logits_.resize(batch.size() * size_t(n_vocab));
    if (backend_->forward(batch, logits_.data()) < 0) return false;
    for (size_t r = 0; r < batch.size(); ++r) {
      work& w = ws[owner[r]];
      w.s->tokens.insert(w.s->tokens.end(), batch[r].tokens, batch[r].tokens + batch[r].n_tokens);
      w.n_done += batch[r].n_tokens;
      if (w.n_done == int32_t(w.j->ctx.size())) w.j->out->push_back(argmax(logits_.data() + r * size_t(n_vocab), n_vocab));
    }
  }
  // Then one token per forward: feed the latest proposal, take the next.
  for (int32_t step = 1;; ++step) {
    batch.clear();
    owner.clear();
    for (size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].k <= step) continue;
      const std::vector<token_id>& out = *ws[i].j->out;
      batch.push_back({ws[i].s->blocks.data(), int32_t(ws[i].s->tokens.size()), &out.back(), 1, false});
      owner.push_back(i);
    }
    if (batch.empty()) break;
    logits_.resize(batch.size() * size_t(n_vocab));
    if (backend_->forward(batch, logits_.data()) < 0) return false;
    for (size_t r = 0; r < batch.size(); ++r) {
      work& w = ws[owner[r]];
      w.s->tokens.push_back(w.j->out->back());
      w.j->out->push_back(argmax(logits_.data() + r * size_t(n_vocab), n_vocab));
    }
  }
  return true;
}

void draft_model::on_verified(uint64_t id, int32_t n_proposed, int32_t n_accepted) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || n_proposed <= 0) return;
  seq& s = it->second;
  if (n_accepted == 0) {
    s.k = std::max(1, s.k / 2);
    if (++s.n_fail_streak >= 3) {
      s.n_cooldown = s.backoff;
      s.backoff = std::min(s.backoff * 2, 128);
      s.n_fail_streak = 0;
    }
    return;
  }
  s.n_fail_streak = 0;
  s.backoff = 8;
  s.k = n_accepted == n_proposed ? std::min(s.k + 1, k_max_) : std::max(1, std::min(k_max_, n_accepted + 1));
}

void draft_model::release(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
  seqs_.erase(it);
}

}  // namespace agentq
