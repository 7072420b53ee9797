// Flat open-addressing lookup tables for the tokenizers' hot paths: token text
// -> id, and (left id, right id) -> BPE merge. Built once at load, read-only after.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace agentq {

// Token text -> id over a vocabulary the caller keeps alive and unchanged.
class text_index {
 public:
  // A duplicate text keeps its first id; empty texts are not indexed.
  void build(const std::vector<std::string>& texts) {
    texts_ = &texts;
    size_t cap = 16;
    while (cap < texts.size() * 2) cap <<= 1;
    slots_.assign(cap, slot{0, -1});
    mask_ = cap - 1;
    for (size_t id = 0; id < texts.size(); ++id) {
      if (texts[id].empty()) continue;
      const uint64_t h = hash(texts[id]);
      size_t i = h & mask_;
      bool dup = false;
      for (; slots_[i].id >= 0; i = (i + 1) & mask_) {
        if (slots_[i].hash == static_cast<uint32_t>(h) && texts[slots_[i].id] == texts[id]) { dup = true; break; }
      }
      if (!dup) slots_[i] = {static_cast<uint32_t>(h), static_cast<int32_t>(id)};
    }
  }
  // -1 when absent.
  int32_t find(std::string_view s) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(s);
    for (size_t i = h & mask_; slots_[i].id >= 0; i = (i + 1) & mask_) {
      if (slots_[i].hash == static_cast<uint32_t>(h) && (*texts_)[slots_[i].id] == s) return slots_[i].id;
    }
    return -1;
  }

 private:
  struct slot {
    uint32_t hash;  // low bits of the full hash, to skip most string compares
    int32_t id;     // -1: empty
  };
  static uint64_t hash(std::string_view s) {  // FNV-1a, then a final mix for the low bits
    uint64_t h = 1469598103934665603ull;
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<slot> slots_;
  size_t mask_ = 0;
};

// (left id, right id) -> (rank, merged id).
class merge_index {
 public:
  struct merge {
    int32_t rank;    // lower merges first
    int32_t result;  // id of the merged token
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, slot{k_empty, {0, 0}});
    mask_ = cap - 1;
  }
  // Keeps the first (lowest-rank) entry for a pair. reserve() must have room.
  void insert(int32_t left, int32_t right, merge m) {
    const uint64_t key = pack(left, right);
    size_t i = mix(key) & mask_;
    for (; slots_[i].key != k_empty; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return;
    }
    slots_[i] = {key, m};
  }
  const merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = mix(key) & mask_; slots_[i].key != k_empty; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].m;
    }
    return nullptr;
  }

 private:
  static constexpr uint64_t k_empty = ~0ull;
  struct slot {
    uint64_t key;
    merge m;
  };
  static uint64_t pack(int32_t l, int32_t r) { return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r); }
  static uint64_t mix(uint64_t k) { k *= 0x9E3779B97F4A7C15ull; return k ^ (k >> 32); }
  std::vector<slot> slots_;
  size_t mask_ = 0;
};

}  // namespace agentq
