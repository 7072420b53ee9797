// DELETE routes: a job's content on request, everything of a tenant (see deletion_routes.h).
#include "api/deletion_routes.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "api/batch_specs.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "ops/retention.h"
#include "store/batch_store.h"
#include "store/store.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;

namespace {

http::response json_200(const json& body) {
  http::response r;
  r.status = 200;
  r.body = body.dump();
  return r;
}

http::response retry_later(const char* what) {
  http::response r = error_response(error_kind::unavailable, std::string("could not ") + what + " right now; retry");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace

void install_deletion_routes(http::router& r, api_deps& deps, const authed_wrap& authed, const admin_check& admin_only) {
  r.add("DELETE", "/v1/jobs/{id}", authed([&deps](http::request& req, const auth::key_info& key) {
          std::string id = req.path_param("id");
          auto job = deps.store->get_job(id, key.tenant);
          if (!job) return error_response(error_kind::not_found, "no job '" + id + "'", "id");
          // NOTE: a live job is cancelled first (its worker notices within its cancel poll and writes
          // nothing more: every worker write is fenced on status 'running').
          if (!store::is_terminal(job->status)) {
            auto cs = deps.store->cancel_job(id, key.tenant).get();
            if (cs == store::write_status::error) return retry_later("cancel the job");
          }
          auto ws = deps.store->delete_job(id, key.tenant).get();
          switch (ws) {
            case store::write_status::ok:
              ops::count_deleted("request", 1);
              if (deps.on_job_deleted) deps.on_job_deleted(id);
              spdlog::info("api: job {} deleted by key {}", id, key.id);
              return json_200({{"id", id}, {"object", "job.deleted"}, {"deleted", true}});
            case store::write_status::not_found:
              return error_response(error_kind::not_found, "no job '" + id + "'", "id");
            case store::write_status::fenced:
              return error_response(error_kind::conflict, "job '" + id + "' is not terminal yet; retry");
            default:
              return retry_later("delete the job");
          }
        }));

  r.add("DELETE", "/v1/tenants/{tenant}", authed([&deps, admin_only](http::request& req, const auth::key_info& key) {
          if (auto denied = admin_only(key)) return *denied;
          std::string tenant = req.path_param("tenant");
          int64_t n_deleted = 0, n_cancelled = 0, n_files = 0;
          // Batches and files first (issue 29): a batch still accepting lines stops at its next chunk.
          if (deps.batches) {
            auto paths = deps.batches->delete_tenant(tenant);
            for (const auto& p : paths)
              if (remove_batch_file(deps.files_dir, p)) ++n_files;
          }
          int32_t idle_rounds = 0;
          // In batches: each delete_jobs is one short write transaction.
          while (idle_rounds < 3) {
            auto rows = deps.store->list_tenant_jobs(tenant, 200);
            if (rows.empty()) break;
            std::vector<std::string> ids;
            for (const auto& j : rows) {
              if (!store::is_terminal(j.status) &&
                  deps.store->cancel_job(j.id, tenant).get() == store::write_status::ok)
                ++n_cancelled;
              ids.push_back(j.id);
            }
            int64_t got = deps.store->delete_jobs(ids).get();
            if (got < 0) return retry_later("delete the tenant's jobs");
            n_deleted += got;
            if (deps.on_job_deleted)
              for (const auto& id : ids) deps.on_job_deleted(id);
            idle_rounds = got == 0 ? idle_rounds + 1 : 0;
          }
          ops::count_deleted("tenant", n_deleted);
          spdlog::info("api: tenant {} deleted by key {}: {} jobs ({} cancelled first)", tenant, key.id, n_deleted,
                       n_cancelled);
          return json_200({{"object", "tenant.deleted"},
                           {"tenant", tenant},
                           {"n_jobs_deleted", n_deleted},
                           {"n_jobs_cancelled", n_cancelled},
                           {"n_files_deleted", n_files}});
        }));
}

}  // namespace agentq::api
