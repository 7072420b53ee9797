// Disk tier for parked KV: one file per spilled sequence in engine_config::spill_dir,
// named by model digest + token-prefix hash (+ job key), holding the tokens and their K/V
// rows and ending in a 64-bit checksum. Writes are crash-safe (temp file, fsync, rename,
// fsync of the directory); a file that fails its checksum (or header, or size) is deleted and
// counted, never used. The index is rebuilt from the files at start-up, so spilled KV
// survives a restart; lookups are by token prefix. A size budget evicts the files whose
// jobs are expected to resume last.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"

namespace agentq {

// 64-bit FNV-1a over 8-byte words (bytes for the tail): cheap enough for K/V payloads.
uint64_t checksum64(const void* data, size_t n_bytes, uint64_t seed = 0xcbf29ce484222325ull);

// Wall-clock seconds since the epoch (spill files' resume_at survives a restart).
double wall_now_s();

enum class spill_status { ok, io_error, deadline, over_budget };

class spill_store {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  // dir is created if missing; model_digest separates models sharing a directory.
  // budget_bytes: total size of this model's files at most (0 = unlimited).
  spill_store(std::string dir, const std::string& model_digest, kv_layout layout, int64_t budget_bytes = 0);

  struct entry {
    std::string path;
    std::vector<token_id> tokens;  // the K/V rows the file holds, one per token
    uint64_t job_key = 0;          // the job that wrote it (0: unknown, files of format 1)
    double resume_at = 0;          // wall clock the job is expected to resume (budget eviction order)
    int64_t n_bytes = 0;           // file size
  };
  struct write_options {
    uint64_t job_key = 0;
    double resume_at = 0;                       // see entry::resume_at (0 = now)
    time_point deadline = time_point::max();    // abandon the write (temp file removed) past this
    // fsync the directory after the rename; false: the caller calls sync_dir() once after a batch
    bool sync_dir = true;
  };

  // Write positions [0, n_tokens) of seq_idx with their tokens. The file replaces the job's
  // older files once it is in place. Returns the file's path via *path when non-null.
  spill_status write(const block_pool& pool, int32_t seq_idx, std::span<const token_id> tokens, std::string* path,
                     const write_options& options);
  bool write(const block_pool& pool, int32_t seq_idx, std::span<const token_id> tokens, std::string* path) {
    return write(pool, seq_idx, tokens, path, write_options{}) == spill_status::ok;
  }
  // The entry sharing the longest common prefix with tokens (at least one full block);
  // -1 when none. *n_common receives that prefix length.
  int32_t find(std::span<const token_id> tokens, int32_t* n_common) const;
  // Load the first n_tokens rows of entry entry_idx into the empty seq seq_idx (allocating
  // blocks). false when the file is missing, corrupt (deleted; counted) or the pool is full;
  // the seq is then left empty. The entry is removed from the index either way.
  bool restore(int32_t entry_idx, int32_t n_tokens, block_pool& pool, int32_t seq_idx);
  void erase(const std::string& path);
  // fsync the directory: the renames of a batch of writes (write_options::sync_dir false) reach the disk.
  bool sync_dir() const;
  // Delete every file the job wrote (its job is over). Returns files removed.
  int32_t erase_job(uint64_t job_key);
  // Delete files whose job is not live (orphans of jobs that ended while no process held their
  // KV); files without a job key are kept. Returns files removed.
  int32_t prune(const std::function<bool(uint64_t job_key)>& live);
  // The file size a sequence of n_tokens would take.
  int64_t file_bytes(int32_t n_tokens) const;

  const std::vector<entry>& entries() const { return entries_; }
  const entry* find_path(const std::string& path) const;
  int64_t n_blocks_on_disk() const;
  int64_t n_bytes_on_disk() const;
  int64_t n_corrupt() const { return n_corrupt_; }               // checksum / header / size failures (torn files)
  int64_t n_orphans_removed() const { return n_orphans_removed_; }  // temp files of dead writers, pruned jobs
  int64_t n_budget_evictions() const { return n_budget_evictions_; }
  int64_t n_budget_refused() const { return n_budget_refused_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  const std::string& dir() const { return dir_; }

 private:
  void rebuild_index();
  // Make room for a file of n_bytes expected to resume at resume_at (files of job_key are
  // replaced, not counted); false when only files expected to resume sooner would have to go.
  bool make_room(int64_t n_bytes, double resume_at, uint64_t job_key);
  std::string dir_;
  std::string prefix_;  // file name prefix: 16 hex digits of the digest hash
  uint64_t digest_hash_ = 0;
  kv_layout layout_;
  int64_t budget_bytes_ = 0;
  std::vector<entry> entries_;
  int64_t n_corrupt_ = 0, n_orphans_removed_ = 0, n_budget_evictions_ = 0, n_budget_refused_ = 0;
};

}  // namespace agentq
