// Pre-tokenizer splits (GPT-2, Llama 3, Qwen2 patterns) checked piece by piece,
// and the streaming detokenizer's UTF-8 completeness.
#include <doctest/doctest.h>

#include <random>

#include "gguf/reader.h"
#include "test_env.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace agentq;

namespace {

std::vector<std::string> split(pre_type type, std::string_view text) {
  std::vector<byte_span> spans;
  pre_split(type, text, &spans);
  std::vector<std::string> out;
  size_t next = 0;
  for (const byte_span& s : spans) {
    CHECK(s.begin == next);  // pieces tile the text
    CHECK(s.end > s.begin);
    next = s.end;
    out.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  CHECK(next == text.size());
  return out;
}

using pieces = std::vector<std::string>;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = unicode::valid_utf8_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::unique_ptr<tokenizer> load_vocab(const char* name) {
  std::string err;
  auto f = gguf::file::open((test::shared_dir() / "models" / "vocab" / name).string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto t = tokenizer::load(*f, &err);
  REQUIRE_MESSAGE(t, err);
  return t;
}

}  // namespace

TEST_CASE("llama.cpp's multi-regex splits: falcon and deepseek-coder (each regex splits the pieces so far)") {
  // falcon: punctuation runs first (so no contractions), GPT-2 in each piece, then ASCII digit triplets
  // (which also part a number from its leading space).
  CHECK(split(pre_type::falcon, "x 12345 \xC2\xBD!?") == pieces{"x", " ", "123", "45", " \xC2\xBD", "!?"});
  CHECK(split(pre_type::falcon, "don't") == pieces{"don", "'", "t"});
  CHECK(split(pre_type::falcon, "a+b = c") == pieces{"a", "+", "b", " ", "=", " c"});
  CHECK(split(pre_type::falcon, "`~|^") == pieces{"`~|^"});
  // deepseek-coder: line breaks alone, letters and punctuation with one leading space, CJK runs,
  // one digit per piece; what no regex matches stays a piece ("$" is a symbol, not \p{P}).
  CHECK(split(pre_type::deepseek_coder, "Hello world\n123 x") == pieces{"Hello", " world", "\n", "1", "2", "3", " x"});
  CHECK(split(pre_type::deepseek_coder, "a, b$ \xE4\xBD\xA0\xE5\xA5\xBD") ==
        pieces{"a", ",", " b", "$", " ", "\xE4\xBD\xA0\xE5\xA5\xBD"});
  CHECK(split(pre_type::deepseek_coder, "  x") == pieces{" ", " x"});
  // deepseek-llm: as deepseek-coder with explicit letter / punctuation ranges, a piece's trailing
  // spaces split off ('\s+$'), digit runs whole; U+3000 is a space, so it leads the word after it.
  CHECK(split(pre_type::deepseek_llm, "Hello world\n123 x  ") == pieces{"Hello", " world", "\n", "123", " x", "  "});
  CHECK(split(pre_type::deepseek_llm, "x 12  ") == pieces{"x", " ", "12", "  "});
  CHECK(split(pre_type::deepseek_llm, "a\xEF\xBC\x8C" "b\xE3\x80\x80" "c 3.14") ==
        pieces{"a", "\xEF\xBC\x8C", "b", "\xE3\x80\x80" "c", " ", "3", ".", "14"});
}

TEST_CASE("unicode classes") {
  CHECK(unicode::is_letter('a'));
  CHECK(unicode::is_letter(0xE9));      // é
  CHECK(unicode::is_letter(0x65E5));    // 日
  CHECK(unicode::is_letter(0x0436));    // ж
  CHECK(unicode::is_letter(0x1D400));   // mathematical bold A (astral)
  CHECK(unicode::is_number('7'));
  CHECK(unicode::is_number(0xBD));      // ½
  CHECK(unicode::is_number(0x0663));    // Arabic-Indic three
  CHECK_FALSE(unicode::is_letter(0x1F642));  // emoji
  CHECK(unicode::is_whitespace(0x3000));
  CHECK_FALSE(unicode::is_whitespace(0x200B));  // zero width space is not White_Space
  for (int b = 0; b < 256; ++b) CHECK(unicode::cpt_to_byte(unicode::byte_to_cpt(static_cast<uint8_t>(b))) == b);
  CHECK(unicode::byte_to_cpt(' ') == 0x120);  // 'Ġ'
}

TEST_CASE("gpt-2 split") {
  CHECK(split(pre_type::gpt2, "Hello world") == pieces{"Hello", " world"});
  CHECK(split(pre_type::gpt2, "don't DON'T") == pieces{"don", "'t", " DON", "'", "T"});
  CHECK(split(pre_type::gpt2, "a  b") == pieces{"a", " ", " b"});
  CHECK(split(pre_type::gpt2, "x 12345 ½!?") == pieces{"x", " 12345", " ½", "!?"});
  CHECK(split(pre_type::gpt2, "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC") == pieces{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"});
  CHECK(split(pre_type::gpt2, "end  \n") == pieces{"end", "  \n"});
  CHECK(split(pre_type::gpt2, "\t\tx") == pieces{"\t", "\t", "x"});
  CHECK(split(pre_type::gpt2, "a\xFF\xFE b") == pieces{"a", "\xFF\xFE", " b"});  // invalid bytes are "other"
}

TEST_CASE("llama3 split") {
  CHECK(split(pre_type::llama3, "Hello world 12345 don't\n\n  x") ==
        pieces{"Hello", " world", " ", "123", "45", " don", "'t", "\n\n", " ", " x"});
  CHECK(split(pre_type::llama3, "DON'T") == pieces{"DON", "'T"});  // contractions ignore case
  CHECK(split(pre_type::llama3, "(hello) 1234567") == pieces{"(hello", ")", " ", "123", "456", "7"});
  CHECK(split(pre_type::llama3, "x = {};\n\ny") == pieces{"x", " =", " {};\n\n", "y"});
  CHECK(split(pre_type::llama3, "a \n b") == pieces{"a", " \n", " b"});
  CHECK(split(pre_type::llama3, "\tfoo") == pieces{"\tfoo"});
}

TEST_CASE("qwen2 split: one digit per piece") {
  CHECK(split(pre_type::qwen2, "v12 345") == pieces{"v", "1", "2", " ", "3", "4", "5"});
  CHECK(split(pre_type::qwen2, "Hello, world!") == pieces{"Hello", ",", " world", "!"});
}

TEST_CASE("gpt2 with digits split first (StarCoder, SmolLM)") {
  CHECK(split(pre_type::gpt2_digits, "x 123ab  4") == pieces{"x", " ", "1", "2", "3", "ab", "  ", "4"});
}

TEST_CASE("tekken split: words by case") {
  CHECK(split(pre_type::tekken, "HelloWorld HTTPServer ABC def") ==
        pieces{"Hello", "World", " HTTPServer", " ABC", " def"});
  CHECK(split(pre_type::tekken, " 123") == pieces{" ", "1", "2", "3"});
  CHECK(split(pre_type::tekken, "x/y\n/z") == pieces{"x", "/y", "\n", "/z"});
  CHECK(split(pre_type::tekken, "a.../\nb") == pieces{"a", ".../\n", "b"});
  CHECK(split(pre_type::tekken, "don't") == pieces{"don", "'t"});
  CHECK(split(pre_type::tekken, "\xC3\x89t\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC") ==
        pieces{"\xC3\x89t\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"});  // Été 日本: Lo is both cases
}

TEST_CASE("gpt-4o split: contractions stay on the word, three digits") {
  CHECK(split(pre_type::gpt4o, "I'm DON'T 12345") == pieces{"I'm", " DON'T", " ", "123", "45"});
}

// llama.cpp's rewrite of the o200k pattern (checked against llama-tokenize on the o200k GGUF):
// a combining mark is no letter, and a non-ASCII letter is both cases.
TEST_CASE("gpt-4o split as llama.cpp: marks leave the word, non-ASCII letters take either case") {
  CHECK(split(pre_type::gpt4o, "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B\xE1\x9E\x8F\xE1\x9F\x82") ==
        pieces{"\xE1\x9E\x80", "\xE1\x9E\xB6\xE1\x9E\x93", "\xE1\x9F\x8B\xE1\x9E\x8F", "\xE1\x9F\x82"});  // Khmer
  CHECK(split(pre_type::gpt4o, "Hello\xC3\x89\x63ole \xCE\x91\xCE\x92\xCE\x93\xCE\xB4") ==
        pieces{"Hello\xC3\x89\x63ole", " \xCE\x91\xCE\x92\xCE\x93\xCE\xB4"});  // HelloÉcole, ΑΒΓδ: one word each
  CHECK(split(pre_type::gpt4o, "e\xCC\x81t\xCC\x81 x") == pieces{"e", "\xCC\x81t", "\xCC\x81", " x"});
}

TEST_CASE("stream decoder emits only complete UTF-8") {
  const std::string text = "h\xC3\xA9llo \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 ok \xF0\x9F\xA6\x99!";
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    INFO(name);
    auto tok = load_vocab(name);
    const auto ids = tok->encode(text, false, false);
    stream_decoder dec(*tok);
    std::string got;
    bool held_back = false;
    for (token_id id : ids) {
      const std::string part = dec.push(id);
      CHECK(valid_utf8(part));
      held_back |= dec.n_pending() > 0;
      got += part;
    }
    got += dec.flush();
    CHECK(held_back);  // the emoji are split across byte tokens in both vocabularies
    // SPM keeps the prefix space the encoder added; decode() would strip it.
    CHECK(got == (tok->kind() == vocab_kind::spm ? " " + text : text));
  }
}

TEST_CASE("stream decoder replaces bytes that cannot become UTF-8 with U+FFFD") {
  auto tok = load_vocab("ggml-vocab-gpt-2.gguf");
  const std::string fffd = "\xEF\xBF\xBD";
  // Token by token (gpt-2's byte-level vocabulary: one token per byte here), then flush.
  auto decode = [&](const std::string& bytes) {
    stream_decoder dec(*tok);
    std::string got;
    for (token_id id : tok->encode(bytes, false, false)) got += dec.push(id);
    return got + "|" + dec.flush();
  };
  CHECK(decode("\xFF" "a\xC3") == fffd + "a|" + fffd);  // 0xFF at once; 0xC3 waits, then is cut short
  CHECK(decode("\xB5") == fffd + "|");                   // a lone continuation byte (a <0xB5> token)
  CHECK(decode("\xE6\x97" "a") == fffd + fffd + "a|");  // a character broken off by another
  CHECK(decode("\xC0\x80" "b") == fffd + fffd + "b|");  // overlong
  CHECK(decode("\xED\xA0\x80") == fffd + fffd + fffd + "|");  // a surrogate
  CHECK(decode("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd + "|");  // past U+10FFFF
  CHECK(decode("\xF0\x9F\x99") == "|" + fffd + fffd + fffd);  // held to the end, cut short
  CHECK(decode("h\xC3\xA9 \xF0\x9F\x99\x82") == "h\xC3\xA9 \xF0\x9F\x99\x82|");  // valid: unchanged
  // Random bytes: every piece and the whole are valid UTF-8 (what a JSON string needs).
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(size_t(rng() % 24), '\0');
    for (auto& b : bytes) b = char(rng() % 4 == 0 ? 0x20 + rng() % 90 : 0x80 + rng() % 128);
    stream_decoder dec(*tok);
    std::string all;
    for (token_id id : tok->encode(bytes, false, false)) {
      const std::string part = dec.push(id);
      CHECK(valid_utf8(part));
      all += part;
    }
    all += dec.flush();
    CHECK(valid_utf8(all));
  }
}
