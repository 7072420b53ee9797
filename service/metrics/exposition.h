// Prometheus text exposition (format 0.0.4) of metric families, and their JSON form: worker
// processes write their families to SQLite as JSON and the API process serves them.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "metrics/registry.h"

namespace agentq::metrics {

// The Content-Type of render()'s output.
inline constexpr const char* k_text_content_type = "text/plain; version=0.0.4; charset=utf-8";

// HELP/TYPE lines then samples, families in the given order (histograms: _bucket{le}, _sum, _count).
std::string render(const std::vector<family>& families);

// Sort by name and merge families of the same name (samples concatenated; first HELP/TYPE wins).
std::vector<family> merge(std::vector<family> families);

// Put label name=value first on every sample (e.g. worker="w1").
void add_label(std::vector<family>& families, const std::string& name, const std::string& value);

nlohmann::json to_json(const std::vector<family>& families);
// Malformed entries are skipped.
std::vector<family> from_json(const nlohmann::json& j);

}  // namespace agentq::metrics
