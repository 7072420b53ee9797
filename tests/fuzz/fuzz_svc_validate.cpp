// libFuzzer target: a POST /v1/jobs body through the API's own validation — UTF-8 and
// JSON parsing (parse_body), then validate_job with a real engine_catalog over the tiny
// model (so the engine's up-front check renders and tokenizes the prompt and compiles the
// schemas) and the default SSRF guard. Invariants: no crash or sanitizer report; a refusal
// is a 4xx whose JSON error body serializes; an accepted job names the loaded model.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/model_catalog.h"
#include "api/validate.h"
#include "net/ssrf_guard.h"

using namespace agentq;

namespace {

// The tiny model from $AGENTQ_SHARED_DIR (scripts/fuzz.sh sets it), else ../shared.
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
      std::fprintf(stderr, "fuzz_svc_validate: cannot load %s: %s\n", cfg.model_path.c_str(), err.c_str());
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
  std::string body(reinterpret_cast<const char*>(data), size);
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
  auto job = api::validate_job(*parsed, catalog(), guard, limits, &err);
  if (!job) {
    check_error();
    return 0;
  }
  if (job->model != "stories260K" || job->first_turn.messages.empty()) std::abort();
  if (job->priority != "high" && job->priority != "normal" && job->priority != "low") std::abort();
  return 0;
}
