// Deletion on request (issue 33): DELETE /v1/jobs/{id} (a tenant's own job; running jobs are
// cancelled first) and DELETE /v1/tenants/{tenant} (admin: every job of a tenant). A deleted job
// is a tombstone in the store, and every route answers 404 for it.
#pragma once

#include <functional>
#include <optional>

#include "api/api.h"

namespace agentq::api {

using admin_check = std::function<std::optional<http::response>(const auth::key_info&)>;

void install_deletion_routes(http::router& r, api_deps& deps, const authed_wrap& authed, const admin_check& admin_only);

}  // namespace agentq::api
