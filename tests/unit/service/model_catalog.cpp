// engine_catalog over real engines on the tiny model: each model's chat family in list()
// (what GET /v1/models shows) — detected ("plain": the tiny model has no chat template) or
// set per model with --chat-family (#25).
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "api/model_catalog.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_env.h"

using namespace agentq;

// The tiny model's metadata and tensors, plus a tokenizer.chat_template, at path.
static void copy_with_template(const std::string& path, const std::string& tmpl) {
  std::string err;
  auto src = gguf::file::open(test::tiny_model().string(), &err);
  REQUIRE_MESSAGE(src, err);
  gguf::writer w;
  for (const auto& [k, v] : src->metadata())
    if (k != "tokenizer.chat_template") w.set_value(k, v);
  w.set_string("tokenizer.chat_template", tmpl);
  for (const auto& t : src->tensors()) w.add_tensor(t.name, t.type, t.dims);
  REQUIRE_MESSAGE(w.open(path, &err), err);
  for (const auto& t : src->tensors()) REQUIRE_MESSAGE(w.write_tensor_data(t.data, t.n_bytes, &err), err);
  REQUIRE_MESSAGE(w.close(&err), err);
}

static std::shared_ptr<engine> tiny(const std::string& chat_family, const std::string& path = "") {
  engine_config c;
  c.model_path = path.empty() ? test::tiny_model().string() : path;
  c.n_threads = 1;
  c.kv_budget_bytes = 4ull << 20;
  c.chat_family = chat_family;
  std::string err;
  auto e = engine::load(c, &err);
  REQUIRE_MESSAGE(e, err);
  return std::shared_ptr<engine>(std::move(e));
}

TEST_CASE("model_catalog lists each model's chat family") {
  test::require_tiny_model();
  api::engine_catalog cat;
  cat.add(tiny(""));
  auto l = cat.list();
  REQUIRE(l.size() == 1);
  CHECK(l[0].name == "stories260K");
  CHECK(l[0].chat_family == "plain");   // no tokenizer.chat_template: a base model, not "unknown"
  api::engine_catalog set;
  set.add(tiny("deepseek-r1-distill-qwen"));
  CHECK(set.list()[0].chat_family == "deepseek-r1-distill-qwen");
  std::string err;
  engine_config bad;
  bad.model_path = test::tiny_model().string();
  bad.chat_family = "no-such-family";
  CHECK_FALSE(engine::load(bad, &err));
  CHECK(err.find("unknown chat_family 'no-such-family'") != std::string::npos);
}

TEST_CASE("a chat template that matches no family is 'unknown', not plain; --chat-family overrides it") {
  test::require_tiny_model();
  const auto dir = std::filesystem::temp_directory_path() / ("agentq-catalog-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string odd = (dir / "odd.gguf").string(), r1 = (dir / "r1.gguf").string();
  copy_with_template(odd, "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}");
  copy_with_template(r1, "{{bos_token}}{% for m in messages %}{{'<｜User｜>' + m['content']}}{% endfor %}"
                         "{{'<｜Assistant｜><think>\\n'}}");
  api::engine_catalog cat;
  cat.add(tiny("", odd));
  cat.add(tiny("", r1));
  cat.add(tiny("chatml", odd));
  auto l = cat.list();
  REQUIRE(l.size() == 3);
  CHECK(l[0].name == "odd");
  CHECK(l[0].chat_family == "unknown");
  CHECK(l[1].chat_family == "deepseek-r1");   // detected from the template
  CHECK(l[2].chat_family == "chatml");        // set: no longer unknown
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
