// The agentq REST API: routes, auth (bearer keys, per-key rate limit, tenant scoping),
// job submission with idempotency, reads, cancel, tool outputs, events (JSON and SSE),
// webhook delivery records, models, health and the OpenAPI document.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/validate.h"
#include "http/router.h"

namespace agentq::store {
class store;
class batch_store;
}
namespace agentq::auth {
class key_store;
class rate_limiter;
struct key_info;
}  // namespace agentq::auth
namespace agentq::webhooks {
class dispatcher;
}
namespace agentq::net {
class ssrf_guard;
}
namespace agentq::obs {
class obs_store;
}

namespace agentq::api {

class model_catalog;
class openai_registry;
class batch_runner;
class queue_depth;
class tenant_quota;

// api::install's wrapper for the route files it calls (ui_routes, observability_routes): bearer
// auth + rate limit around a handler that gets the caller's key.
using authed_handler = std::function<http::response(http::request&, const auth::key_info&)>;
using authed_wrap = std::function<http::handler(authed_handler)>;

// A readiness check: true when fine, else false with *why.
using ready_check = std::function<bool(std::string* why)>;

struct api_options {
  validation_limits limits;
  int32_t max_list_limit = 100;
  std::chrono::milliseconds sse_keepalive{15000};  // comment line on an idle stream
  std::string metrics_token;                       // non-empty: GET /metrics needs "Bearer <token>"
  size_t max_batch_line_bytes = 4 << 20;           // one request line of a batch input file
};

struct api_deps {
  store::store* store = nullptr;
  auth::key_store* keys = nullptr;
  auth::rate_limiter* limiter = nullptr;           // nullptr = no rate limit
  const model_catalog* catalog = nullptr;
  const net::ssrf_guard* guard = nullptr;
  webhooks::dispatcher* webhooks = nullptr;        // nullptr = /webhooks lists nothing
  obs::obs_store* obs = nullptr;                   // nullptr = no timelines, engine stats or worker metrics
  openai_registry* openai = nullptr;               // nullptr = no DELETE /v1/responses, no webhook endpoints
  store::batch_store* batches = nullptr;           // nullptr = no Files / Batch API (503)
  batch_runner* runner = nullptr;                  // woken when a batch is created or cancelled
  std::string files_dir;                           // where files' bytes live (DATA_DIR/files)
  queue_depth* depth = nullptr;                    // nullptr = no --max-queue-depth
  tenant_quota* quota = nullptr;                   // nullptr = no --tenant-tokens-per-day
  std::string db_path;                             // the job store's file (GET /v1/usage reads it); "" = none
  std::vector<std::pair<std::string, ready_check>> ready_checks;  // "redis", "database", "engine"
  // After a job became a tombstone on request (drop its KV and spill file, checkpoint soon); may be empty.
  std::function<void(const std::string& job_id)> on_job_deleted;
  // Live workers' adverts (JSON text each) for GET /v1/workers; empty function = none known.
  std::function<std::vector<std::string>()> list_workers;
};

class api {
 public:
  api(api_options options, api_deps deps);
  // Register every route on r.
  void install(http::router& r);

 private:
  api_options options_;
  api_deps deps_;
};

// The OpenAPI 3 document describing every route install() registers.
const std::string& openapi_json();

}  // namespace agentq::api
