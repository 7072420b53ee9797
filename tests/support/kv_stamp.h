// KV pool tests' trivially correct model: each position's K and V rows carry a stamp (the
// token value, V negated) in every layer that holds the block, so a test can append values
// and later read back exactly what a sequence's block table points at.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace agentq::test {

// Stamp one position's K/V rows in every layer.
inline void stamp(block_pool& pool, int32_t block, int32_t row, float v) {
  const int32_t w = pool.layout().row();
  for (int32_t l = 0; l < pool.layout().n_layer; ++l) {
    pool.store().k(l, block)[row * w] = v;
    pool.store().v(l, block)[row * w + 1] = -v;
  }
}

// Whether layer l holds position (block, row)'s stamp v.
inline bool stamped_in(const block_pool& pool, int32_t l, int32_t block, int32_t row, float v) {
  const int32_t w = pool.layout().row();
  return pool.store().k(l, block)[row * w] == v && pool.store().v(l, block)[row * w + 1] == -v;
}

// Append values to a seq (reserve, stamp, commit); false when the pool is exhausted.
inline bool append(block_pool& pool, int32_t seq, const std::vector<int32_t>& vals) {
  const int32_t n0 = pool.seq(seq).n_tokens;
  if (!pool.reserve(seq, n0 + int32_t(vals.size()))) return false;
  const int32_t bs = pool.block_size();
  for (size_t i = 0; i < vals.size(); ++i) {
    const int32_t pos = n0 + int32_t(i);
    stamp(pool, pool.seq(seq).blocks[size_t(pos / bs)], pos % bs, float(vals[i]));
  }
  pool.set_n_tokens(seq, n0 + int32_t(vals.size()));
  return true;
}

}  // namespace agentq::test
