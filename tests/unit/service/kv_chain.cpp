// kv_chain_of: the KV chain a job's stored request names ("kv_chain", a top-level non-empty string),
// else the job's own id; the same answer with or without the key's bytes found first.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "worker/kv_retention.h"

using agentq::worker::kv_chain_of;

TEST_CASE("kv_chain_of: the top-level kv_chain string, else the job id") {
  using nlohmann::json;
  const std::string id = "job_1";
  CHECK(kv_chain_of(json{{"model", "m"}, {"kv_chain", "job_0"}}.dump(), id) == "job_0");
  CHECK(kv_chain_of(json{{"model", "m"}}.dump(), id) == id);
  CHECK(kv_chain_of(json{{"kv_chain", ""}}.dump(), id) == id);
  CHECK(kv_chain_of(json{{"kv_chain", 7}}.dump(), id) == id);
  CHECK(kv_chain_of(json{{"kv_chain", nullptr}}.dump(), id) == id);
  // The key's bytes elsewhere: in a message's text, in a nested object: not the job's chain.
  json in_text = {{"messages", json::array({{{"role", "user"}, {"content", "say \"kv_chain\": \"x\""}}})}};
  CHECK(kv_chain_of(in_text.dump(), id) == id);
  CHECK(kv_chain_of(json{{"openai", {{"kv_chain", "job_9"}}}}.dump(), id) == id);
  // Not JSON at all (a damaged row): the job's own id.
  CHECK(kv_chain_of("", id) == id);
  CHECK(kv_chain_of("{\"kv_chain\":", id) == id);
}
