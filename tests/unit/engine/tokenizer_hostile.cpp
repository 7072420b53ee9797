// Hostile and large inputs: random bytes, invalid UTF-8 and megabyte runs
// encode quickly without crashing and round trip; 100 KB of English is fast.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "gguf/reader.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

using namespace agentq;

namespace {

const char* k_vocabs[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"};

std::unique_ptr<tokenizer> load_vocab(const char* name) {
  std::string err;
  auto f = gguf::file::open((test::shared_dir() / "models" / "vocab" / name).string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto t = tokenizer::load(*f, &err);
  REQUIRE_MESSAGE(t, err);
  return t;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string english(size_t n_bytes) {
  static const char* words[] = {
      "the", "agent", "runs", "a", "long", "task", "and", "calls", "tools", "while", "it", "waits", "for",
      "results,", "then", "writes", "its", "answer.", "Every", "turn", "keeps", "cache", "resident", "so",
      "that", "prefill", "is", "short;", "models", "don't", "need", "to", "recompute", "context", "(mostly)",
      "they're", "fast", "at", "1024", "tokens", "per", "second", "on", "GPUs", "with", "batching.\n"};
  std::mt19937 rng(42);
  std::string s;
  while (s.size() < n_bytes) {
    s += words[rng() % std::size(words)];
    s += ' ';
  }
  return s;
}

}  // namespace

TEST_CASE("random bytes round trip and never crash") {
  std::mt19937 rng(1234);
  for (const char* name : k_vocabs) {
    INFO(name);
    auto tok = load_vocab(name);
    for (int round = 0; round < 20; ++round) {
      std::string bytes(1 + rng() % 4096, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      // NOTE: phi-3's "</s>" is a user-defined token, matched even without parse_special.
      for (bool special : {false, true}) {
        const auto ids = tok->encode(bytes, true, special);
        CHECK(tok->max_tokens(bytes, true, special) >= ids.size());
        const bool in_range = std::all_of(ids.begin(), ids.end(), [&](token_id id) { return id >= 0 && id < tok->n_vocab(); });
        CHECK(in_range);
        if (!special) CHECK(tok->decode(ids) == bytes);
      }
    }
  }
}

TEST_CASE("invalid UTF-8 is encoded byte by byte") {
  const std::string cases[] = {
      "\xC3", "\xC3\x28", "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "\xC0\xAF", "\xF8\x88\x80\x80\x80",
      "ok\xFF" "ok", std::string("nul\0byte", 8), "\x80\x80\x80",
  };
  for (const char* name : k_vocabs) {
    INFO(name);
    auto tok = load_vocab(name);
    for (const std::string& s : cases) {
      const auto ids = tok->encode(s, false, false);
      CHECK(!ids.empty());
      CHECK(tok->decode(ids) == s);
    }
  }
}

TEST_CASE("megabyte runs finish fast") {
  for (const char* name : k_vocabs) {
    INFO(name);
    auto tok = load_vocab(name);
    for (char c : {'a', ' ', '\n', '!'}) {
      const std::string big(1 << 20, c);
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok->encode(big, true, true);
      const double ms = ms_since(t0);
      MESSAGE(std::string(name) << " 1 MiB of '" << (c == '\n' ? std::string("\\n") : std::string(1, c)) << "': " << ids.size()
                   << " tokens in " << ms << " ms");
      CHECK(ms < 30000);  // NOTE: catches quadratic blowups, not slowness: shared machine, sanitizer builds
      CHECK(tok->decode(ids) == big);
    }
  }
}

TEST_CASE("100 KB of English encodes well under 100 ms") {
  const std::string text = english(100 * 1024);
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    INFO(name);
    auto tok = load_vocab(name);
    tok->encode(text, false, false);  // warm up
    double best = 1e9;
    size_t n_tokens = 0;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      n_tokens = tok->encode(text, false, false).size();
      best = std::min(best, ms_since(t0));
    }
    MESSAGE(std::string(name) << ": 100 KiB -> " << n_tokens << " tokens in " << best << " ms ("
                 << 100.0 / 1024 / (best / 1000) << " MB/s)");
    // NOTE: generous bound: the machine is shared and sanitizer builds are slow.
    CHECK(best < 400);
  }
}
