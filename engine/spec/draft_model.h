// Draft-model speculation: a second, smaller model with the target's vocabulary proposes up to
// k tokens per sequence autoregressively (greedy) over its own paged KV, which follows each
// sequence's accepted tokens (rolled back to the common prefix after a rejection).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tokenizer/tokenizer.h"

namespace agentq {

// Identifies a vocabulary: its size and every token's text.
uint64_t vocab_hash(const tokenizer& tok);

class draft_model {
 public:
  // Loads path on device for a target whose tokenizer is target_tok. nullptr + *error when the
  // file does not load or its vocabulary differs from the target's (size, token texts hash).
  static std::unique_ptr<draft_model> load(const std::string& path, const std::string& device, int32_t n_threads,
                                           const tokenizer& target_tok, int32_t target_n_vocab, uint64_t kv_budget_bytes,
                                           int32_t block_size, int32_t k_max, std::string* error);

  struct job {
    uint64_t id = 0;                     // the sequence (request id)
    std::span<const token_id> ctx;       // its tokens; the last one is the next input
    int32_t cap = 0;                     // propose at most this many
    std::vector<token_id>* out = nullptr;
  };
  // For each job: bring the draft's KV of job.id up to ctx (keeping the longest common prefix
  // with what it holds, computing the rest), then min(k, cap) greedy tokens into *out, all jobs
  // batched in each forward. A job that finds no KV room gets none. Call take_turn() first.
  // false when the device failed (the caller turns the engine failed).
  bool propose(std::span<job> jobs);
  // The verifier's answer to the last proposal for id: n_accepted of n_proposed agreed.
  void on_verified(uint64_t id, int32_t n_proposed, int32_t n_accepted);
  // The sequence is gone: its KV blocks are free again.
  void release(uint64_t id);

  const std::string& name() const { return name_; }
  const model_hparams& hparams() const { return backend_->hparams(); }
  std::string failure() const { return backend_->failure(); }
  int32_t n_blocks_free() const { return int32_t(free_.size()); }
  // Whether id should get a proposal this step: false while it backs off (counting the step).
  bool take_turn(uint64_t id);

 private:
  struct seq {
    std::vector<token_id> tokens;  // tokens whose K/V the draft holds (positions 0..size-1)
    std::vector<int32_t> blocks;   // its block table
    int32_t k = 0;                 // current proposal length
    int32_t n_fail_streak = 0, n_cooldown = 0, backoff = 8;
    uint64_t last_use = 0;         // propose() round, for eviction
  };
  // Blocks for positions [0, n_tokens) of s; false when the pool cannot give them (after evicting
  // sequences not in this round).
  bool reserve(seq& s, int32_t n_tokens, uint64_t round);

  std::string name_;
  std::unique_ptr<forward_backend> backend_;
  int32_t block_size_ = 64;
  int32_t k_max_ = 8;
  std::vector<int32_t> free_;      // free block ids
  std::map<uint64_t, seq> seqs_;
  uint64_t round_ = 0;
  std::vector<float> logits_;
};

}  // namespace agentq
