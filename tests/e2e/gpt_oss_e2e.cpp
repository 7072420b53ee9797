// agentqd serves a GPT-OSS model in a job with tool calls (#25): a synthetic gpt-oss file (the
// parity shape: sinks, sliding windows, YaRN, MXFP4 experts) beside the tiny model, chat family
// harmony; a forced call comes back as requires_action, the output goes in, the job runs on.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "agentqd_e2e.h"
#include "gguf/synthetic.h"
#include "test_env.h"

namespace fs = std::filesystem;
using namespace agentq;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace agentq::test::e2e;

TEST_CASE("agentqd serves a gpt-oss model with Harmony tool calls") {
  test::require_tiny_model();
  const fs::path vocab = test::shared_dir() / "models" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) test::skip(vocab.string() + " missing (the shared data beside the checkout)");
  const fs::path dir = fs::temp_directory_path() / ("agentq-gptoss-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path model = dir / "gpt-oss-synthetic.gguf";
  gguf::synthetic_spec spec = gguf::parity_spec("gpt-oss", 25, vocab.string());
  spec.n_ctx = 2048;  // room for Harmony's system and developer messages and a few turns
  std::string err;
  REQUIRE_MESSAGE(gguf::write_synthetic(spec, model.string(), nullptr, &err), err);

  daemon_proc d({"--model", model.string(), "--chat-family", "harmony"});
  api admin{d, k_admin_key};
  auto models = admin.get("/v1/models");
  REQUIRE(models.status == 200);
  bool listed = false;
  for (const auto& m : models.body["data"])
    if (m["id"] == "gpt-oss-synthetic") {
      listed = true;
      CHECK(m["chat_family"] == "harmony");
    }
  CHECK_MESSAGE(listed, models.raw);

  auto [key, secret] = make_tenant(admin, "t-gptoss");
  api user{d, key};
  json body = {{"model", "gpt-oss-synthetic"},
               {"messages", {{{"role", "system"}, {"content", "Use the tool."}}, {{"role", "user"}, {"content", "Look it up."}}}},
               {"max_turns", 2},
               {"max_tokens_per_turn", 96}};
  body["tools"] = {{{"type", "function"},
                    {"function",
                     {{"name", "lookup"},
                      {"description", "Look a word up."},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"q", {{"type", "string"}, {"enum", {"alpha", "beta"}}}}}},
                        {"required", {"q"}}}}}}}};
  body["tool_choice"] = "required";
  auto r = user.post("/v1/jobs", body);
  REQUIRE_MESSAGE(r.status == 202, r.raw);
  const std::string id = r.body["id"];
  json job = user.wait_status(id, {"requires_action", "completed", "failed", "incomplete"}, 120s);
  REQUIRE_MESSAGE(job["status"] == "requires_action", job.dump(2));
  auto calls = job["required_action"]["tool_calls"];
  REQUIRE(calls.size() == 1);  // Harmony: one call per message
  INFO(calls.dump());
  const json& fn = calls[0].contains("function") ? calls[0]["function"] : calls[0];  // pending calls: {id, name, arguments}
  CHECK(fn["name"] == "lookup");
  const json args = fn["arguments"].is_string() ? json::parse(fn["arguments"].get<std::string>()) : fn["arguments"];
  CHECK((args["q"] == "alpha" || args["q"] == "beta"));
  auto ok = user.post("/v1/jobs/" + id + "/tool_outputs",
                      {{"tool_outputs", {{{"tool_call_id", calls[0]["id"]}, {"output", "found 42"}}}}});
  CHECK_MESSAGE(ok.status == 200, ok.raw);
  job = user.wait_status(id, {"completed", "failed", "incomplete", "requires_action"}, 120s);
  CHECK_MESSAGE((job["status"] == "completed" || job["status"] == "incomplete" || job["status"] == "requires_action"),
                job.dump(2));
  CHECK(job["transcript"].dump().find("found 42") != std::string::npos);
  fs::remove_all(dir);
}
