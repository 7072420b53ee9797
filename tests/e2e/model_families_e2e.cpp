// GET /v1/models shows each model's architecture and the chat family detected from its own
// tokenizer.chat_template (#25): the tiny model (llama, no template: plain) beside a synthetic
// phi3 file carrying Phi-4-mini's template (phi4-mini: it differs from Phi-3.5's and Phi-4's),
// no --chat-family given; a tool job on the Phi-4-mini model is accepted (a known family).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agentqd_e2e.h"
#include "gguf/synthetic.h"
#include "test_env.h"

namespace fs = std::filesystem;
using namespace agentq;
using json = nlohmann::json;
using namespace agentq::test::e2e;

TEST_CASE("GET /v1/models shows each model's architecture and detected chat family (phi4-mini)") {
  test::require_tiny_model();
  const fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing (the shared data beside the checkout)");
  std::ifstream in(test::source_dir() / "tests/unit/engine/data/chat/templates/microsoft-Phi-4-mini-instruct.jinja");
  std::stringstream tmpl;
  tmpl << in.rdbuf();
  REQUIRE(!tmpl.str().empty());
  const fs::path dir = fs::temp_directory_path() / ("agentq-families-e2e-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path model = dir / "phi4-mini-synthetic.gguf";
  gguf::synthetic_spec spec = gguf::parity_spec("phi3", 25, vocab.string());
  spec.chat_template = tmpl.str();
  std::string err;
  REQUIRE_MESSAGE(gguf::write_synthetic(spec, model.string(), nullptr, &err), err);

  daemon_proc d({"--model", model.string()});  // after daemon_proc's own --model <tiny>
  api admin{d, k_admin_key};
  auto models = admin.get("/v1/models");
  REQUIRE(models.status == 200);
  int n_seen = 0;
  for (const auto& m : models.body["data"]) {
    if (m["id"] == "phi4-mini-synthetic") {
      CHECK(m["arch"] == "phi3");
      CHECK(m["chat_family"] == "phi4-mini");
      ++n_seen;
    } else {
      CHECK(m["arch"] == "llama");
      CHECK(m["chat_family"] == "plain");
      ++n_seen;
    }
  }
  CHECK_MESSAGE(n_seen == 2, models.raw);
  CHECK_MESSAGE(d.log().find("phi4-mini") != std::string::npos, d.log());

  auto [key, secret] = make_tenant(admin, "t-phi4mini");
  api user{d, key};
  json body = {{"model", "phi4-mini-synthetic"},
               {"messages", {{{"role", "user"}, {"content", "Look it up."}}}},
               {"max_turns", 1},
               {"max_tokens_per_turn", 8}};
  body["tools"] = {
      {{"type", "function"},
       {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}};
  auto r = user.post("/v1/jobs", body);
  CHECK_MESSAGE(r.status == 202, r.raw);
  fs::remove_all(dir);
}
