// libFuzzer target: a POST /v1/chat/completions or /v1/responses body through the OpenAI
// surface's mapping (parse_body, map_chat_request, map_response_request, then validate_job with a
// real engine_catalog over the tiny model). The first byte picks the surface. Invariants: no
// crash or sanitizer report; a refusal is a 4xx whose JSON error body serializes; an accepted
// request maps to a spec that names the loaded model, the surface and client_tool_calls=finish;
// json_text's document_text writes the body and the spec byte for byte as nlohmann's dump.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/json_text.h"
#include "api/model_catalog.h"
#include "api/openai_map.h"
#include "net/ssrf_guard.h"

using namespace agentq;

namespace {

const api::engine_catalog& catalog() {
  static api::engine_catalog* c = [] {
    const char* dir = std::getenv("AGENTQ_SHARED_DIR");
    engine_config cfg;
    cfg.model_path = std::string(dir && *dir ? dir : "../shared") + "/models/stories260K.gguf";
    cfg.n_threads = 1;
    cfg.kv_budget_bytes = 8 << 20;
    std::string err;
    std::shared_ptr<engine> e = engine::load(cfg, &err);
    if (!e) {
      std::fprintf(stderr, "fuzz_svc_openai: cannot load %s: %s\n", cfg.model_path.c_str(), err.c_str());
      std::abort();
    }
    auto* out = new api::engine_catalog;
    out->add(std::move(e));
    return out;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const net::ssrf_guard guard;
  static const api::validation_limits limits;
  if (size == 0) return 0;
  bool chat = data[0] & 1;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  api::validation_error err;
  auto check_error = [&] {
    int status = http::status_of(err.kind);
    if (status < 400 || status >= 500 || err.message.empty()) std::abort();
    auto j = nlohmann::json::parse(http::error_body(err.kind, err.message, err.param), nullptr, false);
    if (j.is_discarded()) std::abort();
  };
  auto parsed = api::parse_body(body, &err);
  if (!parsed) {
    check_error();
    return 0;
  }
  auto job = chat ? api::map_chat_request(*parsed, catalog(), guard, limits, &err)
                  : api::map_response_request(*parsed, nullptr, catalog(), guard, limits, &err);
  if (!job) {
    check_error();
    return 0;
  }
  if (job->spec.value("model", "") != "stories260K" || job->spec.value("client_tool_calls", "") != "finish") std::abort();
  if (job->spec["openai"].value("surface", "") != (chat ? "chat" : "responses")) std::abort();
  // document_text writes what dump writes (it stores the spec of every chat completion and Batch line)
  if (api::document_text(job->spec) != job->spec.dump() || api::document_text(*parsed) != parsed->dump()) std::abort();
  return 0;
}
