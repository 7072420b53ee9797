// libFuzzer target for the tokenizer (scripts/fuzz.sh; unit.fuzz_replay replays inputs through it). An input is text to
// encode, or, when it starts with "GGUF", a model file whose tokenizer metadata
// is loaded and exercised. Build and run:
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -Iengine -Iengine/include -Ikernels/include
//     tests/fuzz/fuzz_tokenizer.cpp engine/tokenizer/*.cpp engine/gguf/{reader,types,split}.cpp -o fuzz_tokenizer && ./fuzz_tokenizer -max_total_time=60
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "gguf/reader.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using namespace agentq;

namespace {

// The vocabulary: $AGENTQ_FUZZ_VOCAB, else the shared GPT-2 vocab beside the checkout.
const tokenizer& vocab() {
  static std::unique_ptr<tokenizer> tok = [] {
    const char* env = std::getenv("AGENTQ_FUZZ_VOCAB");
    const std::string path = env && *env ? env : "../shared/models/vocab/ggml-vocab-gpt-2.gguf";
    std::string err;
    auto f = gguf::file::open(path, &err);
    std::unique_ptr<tokenizer> t = f ? tokenizer::load(*f, &err) : nullptr;
    if (!t) {
      std::fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path.c_str(), err.c_str());
      std::abort();
    }
    return t;
  }();
  return *tok;
}

// Hostile tokenizer metadata: loading fails with a message or yields a tokenizer
// whose output ids are all in range.
void fuzz_load(const uint8_t* data, size_t size) {
  std::string err;
  auto f = gguf::file::parse(data, size, &err);
  if (!f) return;
  auto tok = tokenizer::load(*f, &err);
  if (!tok) {
    if (err.empty()) std::abort();
    return;
  }
  for (const char* text : {"Hello world <s> \xE2\x96\x81 12345 \xFF\xC3", "", "  \n\t<|end|>"}) {
    for (bool special : {false, true}) {
      const auto ids = tok->encode(text, true, special);
      for (token_id id : ids) {
        if (id < 0 || id >= tok->n_vocab()) std::abort();
      }
      tok->decode(ids, special);
    }
  }
  for (token_id id = -1; id <= tok->n_vocab(); ++id) tok->token_to_piece(id, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
    fuzz_load(data, size);
    return 0;
  }
  const tokenizer& tok = vocab();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // Every pre-tokenizer's pieces tile the text in order, none empty.
  for (pre_type p : {pre_type::gpt2, pre_type::llama3, pre_type::qwen2, pre_type::gpt2_digits, pre_type::tekken,
                     pre_type::gpt4o, pre_type::falcon, pre_type::deepseek_coder}) {
    std::vector<byte_span> spans;
    pre_split(p, text, &spans);
    size_t next = 0;
    for (const byte_span& sp : spans) {
      if (sp.begin != next || sp.end <= sp.begin) std::abort();
      next = sp.end;
    }
    if (next != text.size()) std::abort();
  }

  const auto plain = tok.encode(text, true, false);
  for (token_id id : plain) {
    if (id < 0 || id >= tok.n_vocab()) std::abort();
  }
  // max_tokens bounds every encoding (engine::validate trusts it to skip counting).
  if (tok.max_tokens(text, true, false) < plain.size()) std::abort();
  // Byte-level BPE and SPM with byte fallback are lossless, except that SPM
  // cannot tell a literal '▁' from an escaped space and that an added token may
  // swallow the whitespace beside it (Phi-3's "</s>").
  bool lossless = tok.kind() == vocab_kind::bpe || text.find("\xE2\x96\x81") == std::string_view::npos;
  for (token_id id : plain) lossless &= tok.token_type(id) != agentq::token_type::user_defined;
  if (lossless && tok.decode(plain) != text) std::abort();

  const auto special = tok.encode(text, false, true);
  for (token_id id : special) {
    if (id < 0 || id >= tok.n_vocab()) std::abort();
  }
  if (tok.max_tokens(text, false, true) < special.size()) std::abort();
  stream_decoder dec(tok, true);
  std::string streamed;
  for (token_id id : special) streamed += dec.push(id);
  streamed += dec.flush();
  // The stream is always valid UTF-8 (stream_decoder.h: a byte no character can use becomes U+FFFD)
  // and, where the whole decode is valid UTF-8 too, the same text.
  auto valid_utf8 = [](std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
      const size_t n = unicode::valid_utf8_len(s, pos);
      if (n == 0) return false;
      pos += n;
    }
    return true;
  };
  if (!valid_utf8(streamed)) std::abort();
  const std::string whole = tok.decode(special, true);
  if (valid_utf8(whole) && streamed != whole && tok.kind() == vocab_kind::bpe) std::abort();
  return 0;
}
