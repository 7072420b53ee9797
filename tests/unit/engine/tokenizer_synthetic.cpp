// Tokenizer behaviour on small hand-made vocabularies (written with gguf::writer):
// Llama 3 whole-word lookup, BOS defaults, added-token matching, end-of-generation
// detection and SPM byte fallback.
#include <doctest/doctest.h>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "temp_dir.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

using namespace agentq;

namespace {

struct vocab_spec {
  std::string model;                 // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre ("" = absent)
  std::vector<std::string> tokens;
  std::vector<int32_t> types;        // empty = absent
  std::vector<float> scores;         // empty = absent
  std::vector<std::string> merges;   // BPE only
  int64_t bos = -1, eos = -1;        // -1 = absent
};

std::unique_ptr<tokenizer> build(const vocab_spec& v, std::string* error = nullptr) {
  test::temp_dir dir;
  const std::string path = dir.file("vocab.gguf");
  gguf::writer w;
  auto views = [](const std::vector<std::string>& s) { return std::vector<std::string_view>(s.begin(), s.end()); };
  w.set_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_strings("tokenizer.ggml.tokens", views(v.tokens));
  if (!v.types.empty()) w.set_array("tokenizer.ggml.token_type", gguf::value_type::i32, v.types.data(), v.types.size());
  if (!v.scores.empty()) w.set_array("tokenizer.ggml.scores", gguf::value_type::f32, v.scores.data(), v.scores.size());
  if (v.model == "gpt2") w.set_strings("tokenizer.ggml.merges", views(v.merges));
  if (v.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  std::string err;
  REQUIRE_MESSAGE(w.open(path, &err), err);
  REQUIRE_MESSAGE(w.close(&err), err);
  auto f = gguf::file::open(path, &err);
  REQUIRE_MESSAGE(f, err);
  auto t = tokenizer::load(*f, &err);
  if (error) *error = err;
  return t;
}

// Byte-level vocabulary: 'Ġ' is the space byte. Ids are the indices below.
vocab_spec bpe_vocab(std::string pre) {
  vocab_spec v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  v.tokens = {"H", "e", "l", "o", "\xC4\xA0", "w", "r", "d",             // 0-7
              "He", "ll", "or", "Hello", "\xC4\xA0world",                 // 8-12
              "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<tool>"};  // 13-16
  v.types = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 4};
  v.merges = {"H e", "l l", "o r"};  // NOTE: no merges build "Hello" or "Ġworld"
  v.bos = 13;
  v.eos = 14;
  return v;
}

using ids = std::vector<token_id>;

}  // namespace

TEST_CASE("llama-bpe: a word that is a token is taken whole; BOS by default") {
  auto tok = build(bpe_vocab("llama-bpe"));
  REQUIRE(tok);
  CHECK(tok->encode("Hello world", false, false) == ids{11, 12});
  CHECK(tok->encode("Hello world", true, false) == ids{13, 11, 12});
  CHECK(tok->add_bos());
  CHECK(tok->decode(ids{13, 11, 12}) == "Hello world");
  CHECK(tok->decode(ids{13, 11, 12}, true) == "<|begin_of_text|>Hello world");
}

TEST_CASE("gpt-2 pre-tokenizer: merges only, no BOS by default") {
  auto tok = build(bpe_vocab("gpt-2"));
  REQUIRE(tok);
  CHECK(tok->encode("Hello world", true, false) == ids{8, 9, 3, 4, 5, 10, 2, 7});
  CHECK_FALSE(tok->add_bos());
}

TEST_CASE("added tokens: user-defined always, control only with parse_special") {
  auto tok = build(bpe_vocab("llama-bpe"));
  REQUIRE(tok);
  const auto plain = tok->encode("<tool>Hello<|eot_id|>", false, false);
  CHECK(plain.front() == 16);
  CHECK(std::find(plain.begin(), plain.end(), 15) == plain.end());
  CHECK(tok->encode("<tool>Hello<|eot_id|>", false, true) == ids{16, 11, 15});
  CHECK(tok->decode(ids{16, 11, 15}) == "<tool>Hello");
  CHECK(tok->pieces()[16] == "<tool>");
  CHECK(tok->pieces()[15].empty());
}

TEST_CASE("end of generation: eos, and eot found by its text") {
  auto tok = build(bpe_vocab("llama-bpe"));
  REQUIRE(tok);
  CHECK(tok->eos() == 14);
  CHECK(tok->eot() == 15);
  CHECK(tok->is_eog(14));
  CHECK(tok->is_eog(15));
  CHECK_FALSE(tok->is_eog(13));
  CHECK_FALSE(tok->is_eog(-1));
  CHECK(tok->eog_ids() == ids{14, 15});
}

TEST_CASE("bytes the vocabulary lacks are dropped, never out of range") {
  auto tok = build(bpe_vocab("qwen2"));
  REQUIRE(tok);
  const auto out = tok->encode("x\xFFHello 42", false, false);
  for (token_id id : out) CHECK((id >= 0 && id < tok->n_vocab()));
  CHECK(tok->decode(out) == "Hello ");  // 'x', 0xFF, '4' and '2' have no token
}

TEST_CASE("SPM: score order, byte fallback, stream decoding") {
  vocab_spec v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
  }
  const token_id first = static_cast<token_id>(v.tokens.size());
  for (const char* t : {"\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "ab", "bb"}) v.tokens.push_back(t);
  v.types.assign(v.tokens.size(), 1);
  v.types[0] = 2;
  v.types[1] = v.types[2] = 3;
  for (int b = 0; b < 256; ++b) v.types[3 + b] = 6;
  v.scores.assign(v.tokens.size(), 0.0f);
  v.scores[first + 3] = -1.0f;  // "ab"
  v.scores[first + 4] = -2.0f;  // "▁ab"
  v.scores[first + 5] = -0.5f;  // "bb": preferred over "ab"
  auto tok = build(v);
  REQUIRE(tok);
  CHECK(tok->bos() == 1);
  // "▁abb": "bb" scores higher than "ab", so "a" is left alone; "▁a" is no token.
  CHECK(tok->encode("abb", true, false) == ids{1, first, first + 1, first + 5});
  CHECK(tok->encode("ab", false, false) == ids{first + 4});
  // 'c' and 'é' fall back to bytes.
  CHECK(tok->encode("c\xC3\xA9", false, false) == ids{first, 3 + 'c', 3 + 0xC3, 3 + 0xA9});
  CHECK(tok->decode(tok->encode("c\xC3\xA9 ab", true, false)) == "c\xC3\xA9 ab");
  stream_decoder dec(*tok);
  CHECK(dec.push(3 + 0xC3).empty());
  CHECK(dec.push(3 + 0xA9) == "\xC3\xA9");
}

TEST_CASE("unsupported or malformed vocabularies are refused with a message") {
  std::string err;
  vocab_spec v = bpe_vocab("gpt-2");
  v.model = "t5";
  CHECK(build(v, &err) == nullptr);
  CHECK(err.find("t5") != std::string::npos);

  v = bpe_vocab("gpt-2");
  v.types.resize(3);  // shorter than the vocabulary
  CHECK(build(v, &err) == nullptr);
  CHECK(err.find("token_type") != std::string::npos);

  // An unknown pre-tokenizer is a load error naming it, never a silent GPT-2 split (#25).
  CHECK(build(bpe_vocab("deepseek-v3"), &err) == nullptr);
  CHECK_MESSAGE(err.find("unsupported pre-tokenizer 'deepseek-v3'") != std::string::npos, err);
  CHECK(build(bpe_vocab("no-such-pre"), &err) == nullptr);
  CHECK_MESSAGE(err.find("unsupported pre-tokenizer 'no-such-pre'") != std::string::npos, err);
  // An absent key means "default", as in llama.cpp.
  CHECK(build(bpe_vocab(""), &err) != nullptr);
}
