// The --redis URL: redis://[[user]:password@]host[:port][/db] (host may be [IPv6]; user and
// password percent-decoded) into redis_options, or through Redis Sentinel:
// sentinel://[[user]:password@]host[:port][,host[:port]...]/master_name[/db] (sentinels on port
// 26379 by default, at most 16; user and password are the master's). Outside input: never throws,
// never logs secrets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "queue/redis_client.h"

namespace agentq::queue {

// nullopt with *error (which never repeats the password) on a malformed URL. "host:port" without
// a scheme is accepted as before; rediss:// (TLS) is refused: this build's hiredis has no TLS.
std::optional<redis_options> parse_redis_url(std::string_view url, std::string* error);

// The URL with its password replaced by "***" (for logs and error messages).
std::string redact_redis_url(std::string_view url);

}  // namespace agentq::queue
