// What a test reads of agentq's dispatch streams in a real redis-server: the stream keys and the
// entries delivered to a worker but not acked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "queue/redis_client.h"

namespace agentq::test {

// Every stream key agentq dispatches on (priority streams, legacy and per model, incl. batch;
// per-worker continuation streams).
inline std::vector<std::string> job_streams(queue::redis_client& rc) {
  std::vector<std::string> out;
  for (const char* pattern : {"agentq:jobs:*", "agentq:worker:*"}) {
    auto keys = rc.command({"KEYS", pattern});
    for (auto& k : keys.elements)
      if (rc.command({"TYPE", k.str}).str == "stream") out.push_back(k.str);
  }
  return out;
}

// Entries delivered but not acked, summed over the job streams; -1 if Redis did not answer.
inline int64_t n_redis_pending(int port) {
  queue::redis_options ro;
  ro.port = port;
  queue::redis_client rc(ro);
  int64_t n = 0;
  for (auto& s : job_streams(rc)) {
    auto r = rc.command({"XPENDING", s, "workers"});
    if (r.type == queue::redis_reply::kind::array && !r.elements.empty()) n += r.elements[0].integer;
    else if (r.type == queue::redis_reply::kind::io_error) return -1;
  }
  return n;
}

}  // namespace agentq::test
