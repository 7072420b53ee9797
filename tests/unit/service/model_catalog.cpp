// engine_catalog over real engines on the tiny model: each model's chat family in list()
// (what GET /v1/models shows) — detected ("plain": the tiny model has no chat template) or
// set per model with --chat-family (#25).
#include <doctest/doctest.h>

#include "api/model_catalog.h"
#include "test_env.h"

using namespace agentq;

static std::shared_ptr<engine> tiny(const std::string& chat_family) {
  engine_config c;
  c.model_path = test::tiny_model().string();
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
