// The next turn's prompt keeps the token ids the job's KV holds (tokenizer/splice.h): a
// constrained reply's non-canonical splits are kept, a text that diverges inside a token or
// inside a UTF-8 character falls back at the right place, on SentencePiece and byte-level BPE;
// on the real tiny model the turn after a tool call computes only its new tokens.
#include <doctest/doctest.h>

#include "tiny_turns.h"
#include "tokenizer/splice.h"

using namespace agentq;
using namespace agentq::test;

namespace {

std::unique_ptr<tokenizer> load_vocab(const std::filesystem::path& p) {
  std::string err;
  auto f = gguf::file::open(p.string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto t = tokenizer::load(*f, &err);
  REQUIRE_MESSAGE(t, err);
  return t;
}

// s one byte per token (the splits a grammar may force), never the canonical merges.
std::vector<token_id> byte_tokens(const tokenizer& tok, std::string_view s) {
  std::vector<token_id> out;
  for (char c : s) {
    token_id id = -1;
    for (token_id i = 0; i < tok.n_vocab() && id < 0; ++i)
      if (!tok.is_control(i) && tok.pieces()[size_t(i)] == std::string(1, c)) id = i;
    REQUIRE_MESSAGE(id >= 0, "no token for byte ", int(uint8_t(c)));
    out.push_back(id);
  }
  return out;
}

std::vector<token_id> cat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void check_non_canonical_kept(const tokenizer& tok, bool add_special) {
  const std::string t1 = "User: What is the weather in Paris?\nAssistant:";
  const std::string reply = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"all\"}}</tool_call>";
  const std::string text = t1 + reply + "\nTool: sunny, 21 C\nAssistant:";
  const auto held = cat(tok.encode(t1, add_special, true), byte_tokens(tok, reply));
  const auto canonical = tok.encode(text, add_special, true);
  REQUIRE(!std::equal(held.begin(), held.end(), canonical.begin(), canonical.end() - 1));  // non-canonical indeed
  const auto r = splice_prompt(tok, held, text, add_special);
  CHECK(r.n_kept == int32_t(held.size()));
  REQUIRE(r.tokens.size() > held.size());
  CHECK(std::equal(held.begin(), held.end(), r.tokens.begin()));
  CHECK(tok.decode(r.tokens) == text);
  // only the new text is tokenized: as a continuation (no BOS, no SentencePiece space prefix)
  const auto rest = tok.encode_continuation(text.substr(t1.size() + reply.size()), false, true);
  CHECK(std::vector<token_id>(r.tokens.begin() + ptrdiff_t(held.size()), r.tokens.end()) == rest);
}

// Common leading bytes of a and b.
size_t common_bytes(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

TEST_CASE("splice: a constrained reply's non-canonical tokens are kept (SentencePiece, byte-level BPE)") {
  auto spm = load_vocab(test::tiny_model());
  REQUIRE(spm->kind() == vocab_kind::spm);
  check_non_canonical_kept(*spm, true);
  auto bpe = load_vocab(test::shared_dir() / "models" / "vocab" / "ggml-vocab-gpt-2.gguf");
  REQUIRE(bpe->kind() == vocab_kind::bpe);
  check_non_canonical_kept(*bpe, false);
}

TEST_CASE("splice: a text diverging inside a token keeps the tokens before it and tokenizes the rest") {
  auto tok = load_vocab(test::tiny_model());
  const std::string held_text = "Once upon a time, there was a little girl named Lily";
  const std::string text = "Once upon a time, there was a little girafe";
  const auto held = tok->encode(held_text, true, true);
  const auto r = splice_prompt(*tok, held, text, true);
  REQUIRE(r.n_kept > 1);
  REQUIRE(r.n_kept < int32_t(held.size()));
  const size_t L = common_bytes(held_text, text);
  const std::string kept = tok->decode(std::span(held).first(size_t(r.n_kept)));
  CHECK(kept.size() <= L);
  CHECK(text.starts_with(kept));
  // the token after the kept ones straddles the divergence: it is the mid-token case
  CHECK(tok->decode(std::span(held).first(size_t(r.n_kept) + 1)).size() > L);
  CHECK(tok->decode(r.tokens) == text);
  CHECK(std::equal(held.begin(), held.begin() + r.n_kept, r.tokens.begin()));
}

TEST_CASE("splice: byte-fallback tokens diverging inside a UTF-8 character back off to its start") {
  auto tok = load_vocab(test::tiny_model());
  const std::string held_text = "Lily saw a caf\xC3\xA9";  // é = C3 A9
  const std::string text = "Lily saw a caf\xC3\xAA and more";  // ê = C3 AA
  const auto held = tok->encode(held_text, true, true);
  const auto r = splice_prompt(*tok, held, text, true);
  REQUIRE(r.n_kept > 1);
  const std::string kept = tok->decode(std::span(held).first(size_t(r.n_kept)));
  CHECK(text.starts_with(kept));
  CHECK(kept.size() < text.find('\xC3') + 1);  // the <0xC3> byte token is not kept
  CHECK(tok->decode(r.tokens) == text);
}

TEST_CASE("splice: nothing in common, or no BOS where encode adds one: the canonical tokens") {
  auto tok = load_vocab(test::tiny_model());
  const std::string text = "Once upon a time";
  const auto canonical = tok->encode(text, true, true);
  auto r = splice_prompt(*tok, tok->encode("Twice", true, true), text, true);
  CHECK(r.n_kept == 0);
  CHECK(r.tokens == canonical);
  r = splice_prompt(*tok, tok->encode(text, false, true), text, true);
  CHECK(r.n_kept == 0);
  CHECK(r.tokens == canonical);
  r = splice_prompt(*tok, {}, text, true);
  CHECK(r.tokens == canonical);
}

TEST_CASE("engine: the turn after a constrained tool call computes only its new tokens") {
  for (const std::string fam : {"plain", "chatml"}) {
    INFO("family ", fam);
    auto e = load(fam);
    auto t = weather_turn(tool_choice_mode::required);
    t.messages.insert(t.messages.begin(), chat_message{role::system, "Use the weather tool, then answer.", {}, "", ""});
    t.max_tokens = 256;
    auto r1 = run(*e, t);
    check_one_call(r1);
    const int32_t n_held = r1.usage.n_tokens_prompt + int32_t(r1.output_ids.size());
    auto t2 = t;
    auto m = r1.message;
    m.tool_calls[0].id = "call_1";
    t2.messages.push_back(m);
    t2.messages.push_back(chat_message{role::tool, "sunny, 21 C", {}, "call_1", "get_weather"});
    t2.choice.mode = tool_choice_mode::none;
    t2.max_tokens = 4;
    // what the canonical tokens would share with the KV (before the splice)
    const auto canonical = e->tokenize(e->render(t2.messages, t2.tools), !chat::traits(e->family()).bos_in_text, true);
    auto held = e->tokenize(e->render(t.messages, t.tools), !chat::traits(e->family()).bos_in_text, true);
    held.insert(held.end(), r1.output_ids.begin(), r1.output_ids.end());
    size_t n_canonical_common = 0;
    while (n_canonical_common < held.size() && n_canonical_common < canonical.size() &&
           held[n_canonical_common] == canonical[n_canonical_common])
      ++n_canonical_common;
    auto r2 = run(*e, t2);
    const int32_t n_new = r2.usage.n_tokens_prompt - n_held;
    MESSAGE(fam << ": turn 1 prompt " << r1.usage.n_tokens_prompt << " + completion " << r1.output_ids.size()
                << "; turn 2 prompt " << r2.usage.n_tokens_prompt << " cached " << r2.usage.n_tokens_cached
                << " computed " << r2.usage.n_tokens_computed << " (canonical tokens share " << n_canonical_common
                << " of " << held.size() << ")");
    CHECK(n_new > 0);
    // every token the KV holds is reused (the last sampled one has no K/V yet)
    CHECK(r2.usage.n_tokens_cached == n_held - 1);
    CHECK(r2.usage.n_tokens_computed == n_new + 1);
    e->release(t.job_key);
  }
}
