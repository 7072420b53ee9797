// `agentq status ID --timeline`: a job.timeline object (GET /v1/jobs/{id}/timeline) as a text
// chart — one row per span with its offset from submission, duration and a proportional bar,
// then the marks. In the library (not service/cli/) so a unit test can reach it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace agentq::client {

// width: bar columns. now_ms ends open spans (still running).
std::string render_timeline(const nlohmann::json& timeline, int32_t width, int64_t now_ms);

}  // namespace agentq::client
