// GET /v1/workers: live workers' adverts (queue::announce), newest state first by id (see worker_routes.h).
#include "api/worker_routes.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/reply.h"
#include "store/store.h"

namespace agentq::api {

using json = nlohmann::json;

void install_worker_routes(http::router& r, api_deps& deps, const authed_wrap& authed, const admin_check& admin_only) {
  r.add("GET", "/v1/workers", authed([&deps, admin_only](http::request&, const auth::key_info& key) {
          if (auto denied = admin_only(key)) return *denied;
          json data = json::array();
          const int64_t now = store::now_ms();
          if (deps.list_workers)
            for (const auto& text : deps.list_workers()) {
              json w = json::parse(text, nullptr, false);
              if (!w.is_object()) continue;  // NOTE: a malformed advert (another version?) is skipped, not fatal
              w["object"] = "worker";
              if (w.contains("last_heartbeat_ms") && w["last_heartbeat_ms"].is_number_integer())
                w["heartbeat_age_ms"] = std::max<int64_t>(0, now - w["last_heartbeat_ms"].get<int64_t>());
              data.push_back(std::move(w));
            }
          std::sort(data.begin(), data.end(),
                    [](const json& a, const json& b) { return a.value("id", "") < b.value("id", ""); });
          return json_response(200, {{"object", "list"}, {"data", data}});
        }));
}

}  // namespace agentq::api
