// AGENTQ_FAULT fault points (see fault.h).
#include "util/fault.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace agentq {

void fault_point(std::string_view point, std::string_view subject) {
  // NOTE: getenv on every check (a few per turn) so a forked test child can arm it late.
  const char* armed = std::getenv("AGENTQ_FAULT");
  if (!armed || !*armed || point != armed) return;
  const char* match = std::getenv("AGENTQ_FAULT_MATCH");
  if (match && *match && subject.find(match) == std::string_view::npos) return;
  std::fprintf(stderr, "agentq: AGENTQ_FAULT=%s: exiting with 137\n", armed);
  ::_exit(137);
}

}  // namespace agentq
