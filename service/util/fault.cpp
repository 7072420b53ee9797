// AGENTQ_FAULT fault points (see fault.h).
#include "worker/fault.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace agentq::worker {

void fault_point(std::string_view point) {
  // NOTE: getenv on every check (a few per turn) so a forked test child can arm it late.
  const char* armed = std::getenv("AGENTQ_FAULT");
  if (armed && *armed && point == armed) {
    std::fprintf(stderr, "agentq: AGENTQ_FAULT=%s: exiting with 137\n", armed);
    ::_exit(137);
  }
}

}  // namespace agentq::worker
