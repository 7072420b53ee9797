// Disk tier for parked KV: one file per spilled sequence in engine_config::spill_dir,
// named by model digest + token-prefix hash, holding the tokens and their K/V rows and
// ending in a 64-bit checksum. A file that fails its checksum (or header) is deleted and
// reported, never used. The index is rebuilt from the files at start-up, so spilled KV
// survives a restart; lookups are by token prefix, not by job.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"

namespace agentq {

// 64-bit FNV-1a over 8-byte words (bytes for the tail): cheap enough for K/V payloads.
uint64_t checksum64(const void* data, size_t n_bytes, uint64_t seed = 0xcbf29ce484222325ull);

class spill_store {
 public:
  // dir is created if missing; model_digest separates models sharing a directory.
  spill_store(std::string dir, const std::string& model_digest, kv_layout layout);

  struct entry {
    std::string path;
    std::vector<token_id> tokens;  // the K/V rows the file holds, one per token
  };

  // Write positions [0, n_tokens) of seq_idx with their tokens; false on I/O error.
  // Returns the file's path via *path when non-null.
  bool write(const block_pool& pool, int32_t seq_idx, std::span<const token_id> tokens, std::string* path);
  // The entry sharing the longest common prefix with tokens (at least one full block);
  // -1 when none. *n_common receives that prefix length.
  int32_t find(std::span<const token_id> tokens, int32_t* n_common) const;
  // Load the first n_tokens rows of entry entry_idx into the empty seq seq_idx (allocating
  // blocks). false when the file is missing, corrupt (deleted; counted) or the pool is full;
  // the seq is then left empty. The entry is removed from the index either way.
  bool restore(int32_t entry_idx, int32_t n_tokens, block_pool& pool, int32_t seq_idx);
  void erase(const std::string& path);

  const std::vector<entry>& entries() const { return entries_; }
  int64_t n_blocks_on_disk() const;
  int64_t n_corrupt() const { return n_corrupt_; }
  const std::string& dir() const { return dir_; }

 private:
  void rebuild_index();
  std::string dir_;
  std::string prefix_;  // file name prefix: 16 hex digits of the digest hash
  uint64_t digest_hash_ = 0;
  kv_layout layout_;
  std::vector<entry> entries_;
  int64_t n_corrupt_ = 0;
};

}  // namespace agentq
