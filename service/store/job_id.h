// Job ids: "job_" + 24 hex digits, time-ordered (store-private; the format API cursors check).
#pragma once

#include <cstdint>
#include <string>

#include "util/crypto.h"

namespace agentq::store {

// "job_" + 12 hex digits of now_ms (48 bits, big-endian) + 12 hex digits of 6 random bytes.
// NOTE: time-ordered on purpose (session 22; the ids were 12 random bytes before): jobs submitted
// together sort together, so a group commit's inserts into the B-trees keyed by job id (jobs'
// primary key, job_events_job, outbox_job, job_keys, transcript, tool_results) land on the same
// rightmost leaves instead of one random leaf per job and index, and a commit writes fewer WAL
// pages. Ids still sort by submit time only to the ms (the random half orders a ms's jobs); an id
// reveals its job's submit time (as its created_at does). 48 random bits per ms: the caller retries
// the insert with a new id on the (improbable) duplicate.
// NOTE: the random half is taken from a per-thread buffer of RAND_bytes output, refilled 252 bytes
// (42 ids) at a time: a RAND_bytes call per id (OpenSSL's DRBG re-keys its cipher on every call) was
// ~1 % of agentqd's CPU, on the writer thread, in every submit's commit (session 23). Same
// generator, same bytes.
inline std::string new_job_id(int64_t now_ms) {
  constexpr size_t k_n_random = 6, k_pool = 42 * k_n_random;
  thread_local std::string pool;
  thread_local size_t used = 0;
  if (used + k_n_random > pool.size()) {
    pool = crypto::random_bytes(k_pool);
    used = 0;
  }
  std::string b(2 * k_n_random, '\0');
  for (int i = 0; i < 6; ++i) b[i] = static_cast<char>((static_cast<uint64_t>(now_ms) >> (8 * (5 - i))) & 0xff);
  b.replace(k_n_random, k_n_random, pool, used, k_n_random);
  used += k_n_random;
  return "job_" + crypto::to_hex(b);
}

}  // namespace agentq::store
