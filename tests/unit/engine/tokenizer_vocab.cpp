// Tokenizers against llama.cpp's vocab test vectors (shared/models/vocab/*.gguf
// with .inp/.out), the tiny model's golden prompt ids, round trips and special tokens.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "gguf/reader.h"
#include "test_env.h"
#include "tokenizer/tokenizer.h"

using namespace agentq;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<tokenizer> load_vocab(const std::filesystem::path& p) {
  std::string err;
  auto f = gguf::file::open(p.string(), &err);
  REQUIRE_MESSAGE(f, err);
  auto t = tokenizer::load(*f, &err);
  REQUIRE_MESSAGE(t, err);
  return t;
}

// .inp: texts, each followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> read_inputs(const std::filesystem::path& p) {
  const std::string all = slurp(p);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t begin = 0;
  for (size_t at; (at = all.find(sep, begin)) != std::string::npos; begin = at + sep.size()) {
    texts.push_back(all.substr(begin, at - begin));
  }
  return texts;
}

// .out: one line of space-separated ids per text.
std::vector<std::vector<token_id>> read_outputs(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::vector<token_id>> rows;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::vector<token_id> ids;
    for (token_id id; ss >> id;) ids.push_back(id);
    rows.push_back(ids);
  }
  return rows;
}

std::string join(const std::vector<token_id>& ids) {
  std::string s;
  for (token_id id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

const char* k_vocabs[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"};

}  // namespace

TEST_CASE("vocab test vectors match exactly") {
  for (const char* name : k_vocabs) {
    const auto path = test::shared_dir() / "models" / "vocab" / name;
    INFO(name);
    auto tok = load_vocab(path);
    const auto inputs = read_inputs(path.string() + ".inp");
    const auto expected = read_outputs(path.string() + ".out");
    REQUIRE(inputs.size() == expected.size());
    REQUIRE(inputs.size() > 40);
    int n_fail = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto ids = tok->encode(inputs[i], false, false);
      CHECK(tok->max_tokens(inputs[i], false, false) >= ids.size());
      if (ids != expected[i]) {
        ++n_fail;
        FAIL_CHECK("case " << i << " text '" << inputs[i] << "'\n  got  " << join(ids) << "\n  want "
                           << join(expected[i]));
      }
    }
    CHECK(n_fail == 0);
  }
}

TEST_CASE("decode(encode(x)) round trips the test texts") {
  for (const char* name : k_vocabs) {
    const auto path = test::shared_dir() / "models" / "vocab" / name;
    INFO(name);
    auto tok = load_vocab(path);
    for (const std::string& text : read_inputs(path.string() + ".inp")) {
      const auto ids = tok->encode(text, true, false);
      CHECK_MESSAGE(tok->decode(ids) == text, "text '" << text << "'");
    }
  }
}

TEST_CASE("tiny model: golden prompt ids and special ids") {
  auto tok = load_vocab(test::tiny_model());
  CHECK(tok->n_vocab() == 512);
  CHECK(tok->kind() == vocab_kind::spm);
  CHECK(tok->bos() == 1);
  CHECK(tok->eos() == 2);
  CHECK(tok->is_eog(2));
  CHECK_FALSE(tok->is_eog(1));
  CHECK(tok->encode("Once upon a time", true, false) == std::vector<token_id>{1, 403, 407, 261, 378});
  CHECK(tok->encode("", true, false) == std::vector<token_id>{1});
  CHECK(tok->encode("", false, false).empty());
  CHECK(tok->token_text(13) == "<0x0A>");
  CHECK(tok->token_to_piece(13) == "\n");
  CHECK(tok->token_type(13) == agentq::token_type::byte);
  CHECK(tok->token_to_piece(1).empty());
  CHECK(tok->token_to_piece(1, true) == "<s>");
  CHECK(tok->token_to_piece(-1).empty());
  CHECK(tok->token_to_piece(512).empty());
  const auto& pieces = tok->pieces();
  REQUIRE(pieces.size() == 512);
  CHECK(pieces[1].empty());
  CHECK(pieces[403] == tok->token_to_piece(403));
  CHECK(pieces[403][0] == ' ');  // "▁Once" decodes with its space
}

TEST_CASE("gpt-2: byte-level pieces and end of text") {
  auto tok = load_vocab(test::shared_dir() / "models" / "vocab" / "ggml-vocab-gpt-2.gguf");
  CHECK(tok->kind() == vocab_kind::bpe);
  CHECK(tok->n_vocab() == 50257);
  CHECK(tok->eos() == 50256);
  CHECK(tok->is_eog(50256));
  CHECK(tok->eot() == 50256);  // detected by text: <|endoftext|>
  const token_id hello = tok->find_token("\xC4\xA0Hello");  // "ĠHello"
  REQUIRE(hello >= 0);
  CHECK(tok->token_to_piece(hello) == " Hello");
  // Special text is plain text unless parse_special.
  const auto plain = tok->encode("a<|endoftext|>b", false, false);
  CHECK(plain.size() > 3);
  const auto parsed = tok->encode("a<|endoftext|>b", false, true);
  REQUIRE(parsed.size() == 3);
  CHECK(parsed[1] == 50256);
  CHECK(tok->decode(parsed, true) == "a<|endoftext|>b");
  CHECK(tok->decode(parsed) == "ab");
}

TEST_CASE("phi-3: chat tokens parse as special tokens") {
  auto tok = load_vocab(test::shared_dir() / "models" / "vocab" / "ggml-vocab-phi-3.gguf");
  const token_id user = tok->find_token("<|user|>");
  const token_id end = tok->find_token("<|end|>");
  const token_id assistant = tok->find_token("<|assistant|>");
  REQUIRE(user == 32010);
  REQUIRE(end == 32007);
  REQUIRE(assistant == 32001);
  CHECK(tok->eos() == 32000);
  CHECK(tok->eot() == end);
  CHECK(tok->is_eog(end));
  CHECK(tok->is_eog(32000));
  CHECK_FALSE(tok->is_eog(user));
  CHECK(tok->is_control(end));

  const std::string prompt = "<|user|>\nHello there<|end|>\n<|assistant|>\n";
  const auto ids = tok->encode(prompt, true, true);
  const auto body = tok->encode("Hello there", false, false);
  // BOS, <|user|>, the text (the newline after each added token is stripped, as
  // Phi-3's tokenizer.json says), <|end|>, <|assistant|>.
  std::vector<token_id> want = {1, user};
  want.insert(want.end(), body.begin(), body.end());
  want.push_back(end);
  want.push_back(assistant);
  CHECK(ids == want);
  // Without parse_special the markers are text.
  const auto plain = tok->encode(prompt, false, false);
  CHECK(std::find(plain.begin(), plain.end(), user) == plain.end());
  CHECK(std::find(plain.begin(), plain.end(), end) == plain.end());
  CHECK(tok->decode(plain) == prompt);
  // Rendered back with special = true.
  CHECK(tok->decode(tok->encode("<|user|>Hi<|end|>", false, true), true) == "<|user|> Hi<|end|>");
}

// A GGUF image whose only metadata is tokenizer.ggml.model = model.
static std::string gguf_with_model(std::string_view model) {
  std::string img;
  auto put = [&](const void* p, size_t n) { img.append(static_cast<const char*>(p), n); };
  auto put_u32 = [&](uint32_t v) { put(&v, 4); };
  auto put_u64 = [&](uint64_t v) { put(&v, 8); };
  auto put_str = [&](std::string_view s) { put_u64(s.size()); put(s.data(), s.size()); };
  put("GGUF", 4);
  put_u32(3);
  put_u64(0);  // tensors
  put_u64(1);  // metadata pairs
  put_str("tokenizer.ggml.model");
  put_u32(8);  // string
  put_str(model);
  return img;
}

TEST_CASE("load errors are messages") {
  for (auto [model, want] : {std::pair{"wordpiece", "wordpiece"}, {"llama", "vocabulary"}, {"gpt2", "vocabulary"}}) {
    const std::string img = gguf_with_model(model);
    std::string err;
    auto f = gguf::file::parse(reinterpret_cast<const uint8_t*>(img.data()), img.size(), &err);
    REQUIRE_MESSAGE(f, err);
    CHECK(tokenizer::load(*f, &err) == nullptr);
    CHECK_MESSAGE(err.find(want) != std::string::npos, err);
  }
}
