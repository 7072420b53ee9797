// The agentq release and the worker <-> control-plane protocol version, advertised by workers
// (GET /v1/workers) so a mixed fleet shows what runs where.
#pragma once

namespace agentq {

inline constexpr const char* k_version = "0.28.0-dev";
// NOTE: bump when what a worker writes to Redis or SQLite changes meaning; docs/deploy.md.
inline constexpr int k_protocol_version = 1;

}  // namespace agentq
