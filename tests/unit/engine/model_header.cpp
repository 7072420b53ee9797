// model_header (a control plane's model, #28): built from the GGUF header alone it describes the
// model as engine::load does and validates requests with the same messages (all but the KV-room
// check); its bytes round-trip through parse(); truncated or oversized headers are clear errors,
// the same as the full reader's; a header-only file is a model header.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agentq/model_header.h"
#include "gguf/reader.h"
#include "temp_dir.h"
#include "test_env.h"

using namespace agentq;

namespace {

std::unique_ptr<engine> load_engine(const std::string& family = "") {
  engine_config c;
  c.model_path = test::tiny_model().string();
  c.n_threads = 1;
  c.kv_budget_bytes = 8 << 20;
  c.chat_family = family;
  std::string err;
  auto e = engine::load(c, &err);
  REQUIRE_MESSAGE(e, err);
  return e;
}

turn_request user(const std::string& text) {
  turn_request r;
  r.messages.push_back({role::user, text, {}, {}, {}});
  return r;
}

std::vector<turn_request> requests() {
  std::vector<turn_request> out;
  out.push_back(user("Once upon a time"));
  out.push_back(turn_request{});  // no messages
  auto bad_schema = user("hi");
  bad_schema.tools.push_back({"f", "", R"({"type": "nope"})"});
  out.push_back(bad_schema);
  auto unnamed = user("hi");
  unnamed.tools.push_back({"", "", R"({"type": "object"})"});
  out.push_back(unnamed);
  auto named = user("hi");
  named.tools.push_back({"f", "", R"({"type": "object"})"});
  named.choice = {tool_choice_mode::named, "g"};
  out.push_back(named);
  auto required = user("hi");
  required.choice = {tool_choice_mode::required, ""};
  out.push_back(required);
  auto resp = user("hi");
  resp.response_schema_json = R"({"type": 5})";
  out.push_back(resp);
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "Once upon a time ";
  out.push_back(user(long_text));
  auto neg = user("hi");
  neg.max_tokens = -1;
  out.push_back(neg);
  return out;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("model_header describes the model as engine::load does and validates with its messages") {
  for (std::string family : {"", "chatml"}) {
    auto e = load_engine(family);
    std::string err;
    auto h = model_header::open(test::tiny_model().string(), family, &err);
    REQUIRE_MESSAGE(h, err);
    const auto &a = e->model(), &b = h->model();
    CHECK(b.name == a.name);
    CHECK(b.arch == a.arch);
    CHECK(b.n_ctx == a.n_ctx);
    CHECK(b.n_vocab == a.n_vocab);
    CHECK(b.n_embd == a.n_embd);
    CHECK(b.n_layer == a.n_layer);
    CHECK(b.n_head == a.n_head);
    CHECK(b.n_head_kv == a.n_head_kv);
    CHECK(b.chat_family == a.chat_family);
    CHECK(b.bos == a.bos);
    CHECK(b.eos == a.eos);
    CHECK(b.device == "none");
    int n_errors = 0;
    for (const auto& r : requests()) {
      auto ve = e->validate(r), vh = h->validate(r);
      CHECK(ve == vh);
      n_errors += ve.has_value();
      CHECK(e->render(r.messages, r.tools) == h->render(r.messages, r.tools));
    }
    CHECK(n_errors >= 6);  // the first request is fine, the others are refused
    CHECK(e->tokenize("Once upon a time", true, true) == h->tokenize("Once upon a time", true, true));
  }
}

TEST_CASE("model_header reads the header only and its bytes round-trip through parse") {
  std::string err;
  const std::string path = test::tiny_model().string();
  auto h = model_header::open(path, "", &err);
  REQUIRE_MESSAGE(h, err);
  auto full = gguf::file::open(path, &err);
  REQUIRE(full);
  auto hdr = gguf::file::open_header(path, &err);
  REQUIRE_MESSAGE(hdr, err);
  CHECK(hdr->header_bytes() == full->header_bytes());
  CHECK(h->bytes().size() == full->header_bytes());
  CHECK(h->bytes().size() < std::filesystem::file_size(path));
  CHECK(h->bytes() == read_file(path).substr(0, h->bytes().size()));
  CHECK(hdr->tensors().size() == full->tensors().size());
  for (const auto& t : hdr->tensors()) CHECK(t.data == nullptr);

  auto p = model_header::parse(h->bytes(), "copy", "", &err);
  REQUIRE_MESSAGE(p, err);
  CHECK(p->model().name == "copy");
  CHECK(p->model().digest == h->model().digest);
  CHECK(p->model().n_ctx == h->model().n_ctx);
  for (const auto& r : requests()) CHECK(p->validate(r) == h->validate(r));

  // truncated header bytes, garbage, empty
  CHECK_FALSE(model_header::parse(h->bytes().substr(0, h->bytes().size() / 2), "x", "", &err));
  CHECK(err.find("model 'x': invalid GGUF header") == 0);
  CHECK_FALSE(model_header::parse("GGUF\3\0\0\0", "x", "", &err));
  CHECK_FALSE(model_header::parse("", "x", "", &err));
  CHECK_FALSE(model_header::parse(h->bytes(), "x", "no-such-family", &err));
  CHECK(err == "unknown chat_family 'no-such-family'");
}

TEST_CASE("open_header: a truncated file and an oversized header are the full reader's errors") {
  test::temp_dir dir;
  const std::string whole = read_file(test::tiny_model().string());
  std::string err;
  auto full = gguf::file::open(test::tiny_model().string(), &err);
  REQUIRE(full);
  // cut inside the tensor data: the header parses, a tensor's extent lies past the end
  for (size_t cut : {size_t(full->header_bytes() + 100), size_t(full->header_bytes() / 2), size_t(10)}) {
    const std::string p = dir.file("cut.gguf");
    std::ofstream(p, std::ios::binary | std::ios::trunc) << whole.substr(0, cut);
    std::string e_full, e_hdr;
    CHECK_FALSE(gguf::file::open(p, &e_full));
    CHECK_FALSE(gguf::file::open_header(p, &e_hdr));
    CHECK(e_hdr == e_full);
  }
  // a header-only file (agentq-engine header) is a model header, not a truncated model
  const std::string only = dir.file("only.gguf");
  std::ofstream(only, std::ios::binary | std::ios::trunc) << whole.substr(0, full->header_bytes());
  CHECK_FALSE(gguf::file::open(only, &err));
  auto h_only = model_header::open(only, "", &err);
  REQUIRE_MESSAGE(h_only, err);
  auto h_whole = model_header::open(test::tiny_model().string(), "", &err);
  REQUIRE(h_whole);
  CHECK(h_only->model().digest == h_whole->model().digest);
  CHECK(h_only->model().n_vocab == h_whole->model().n_vocab);
  // a header over the cap
  CHECK_FALSE(gguf::file::open_header(test::tiny_model().string(), &err, 4096));
  CHECK(err.find("may not exceed") != std::string::npos);
  // not a file
  CHECK_FALSE(model_header::open(dir.file("missing.gguf"), "", &err));
  CHECK(err.find("cannot load model") == 0);
}

// engine::validate and model_header::validate may clear a prompt on tokenizer::max_tokens (an upper
// bound) instead of its count: a prompt is still accepted exactly when its count fits, and a
// refusal names the exact count. Prompts from a few tokens to past the context cross both paths
// (the bound is ~3-4x the count here: stories260K's tokens are words and pieces of words).
TEST_CASE("validation: accepted exactly when the token count fits; a refusal names the count") {
  auto e = load_engine();
  std::string err;
  auto h = model_header::open(test::tiny_model().string(), "", &err);
  REQUIRE_MESSAGE(h, err);
  const int32_t n_ctx = e->model().n_ctx;
  REQUIRE(n_ctx > 0);
  const char* words[] = {"Once", "upon", "a", "time,", "there", "was", "little", "girl", "named", "Lily.",
                         "She", "loved", "to", "play", "outside", "in", "the", "park", "with", "her", "dog"};
  std::string text;
  int n_ok = 0, n_refused = 0;
  for (int i = 0; n_refused < 20; ++i) {
    text += words[(i * 7) % std::size(words)];
    text += ' ';
    const auto r = user(text);
    const size_t exact = e->tokenize(e->render(r.messages, r.tools), true, true).size();
    const auto v = e->validate(r);
    CHECK(v == h->validate(r));
    if (exact > size_t(n_ctx)) {
      REQUIRE(v);
      CHECK(*v == "messages: the prompt has " + std::to_string(exact) + " tokens, the model's context is " +
                      std::to_string(n_ctx));
      ++n_refused;
    } else {
      CHECK_FALSE(v);
      ++n_ok;
    }
  }
  CHECK(n_ok > n_ctx / 4);
}
