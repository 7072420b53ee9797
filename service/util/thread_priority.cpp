// Thread priority classes by thread name (see thread_priority.h).
#include "util/thread_priority.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace agentq::util {

const std::vector<std::string>& worker_thread_names() {
  // aq-engine: the engine's step loop; aq-engine-pool: its forward pass workers; aq-dispatch: the
  // worker's claim loop (it starts the job threads, which inherit its nice value); aq-job: job threads;
  // aq-job-ends: the worker's grouping of job ends (end_batcher, queue7b), where it exists.
  static const std::vector<std::string> k = {"aq-engine", "aq-engine-pool", "aq-dispatch", "aq-job", "aq-job-ends"};
  return k;
}

int32_t lower_threads_named(const std::vector<std::string>& names, int32_t nice_increment, std::string* why) {
  if (nice_increment <= 0) return 0;
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  if (ec) {
    if (why) *why = "reading /proc/self/task: " + ec.message();
    return -1;
  }
  // NOTE: relative to the main thread's nice (the process's, as started), not to each thread's own,
  // so a second call changes nothing.
  errno = 0;
  int base = getpriority(PRIO_PROCESS, id_t(getpid()));
  if (base == -1 && errno != 0) base = 0;
  const int target = std::min(19, base + nice_increment);
  int32_t n_changed = 0;
  for (const auto& entry : it) {
    std::string name;
    std::getline(std::ifstream(entry.path() / "comm"), name);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    const id_t tid = id_t(std::stoul(entry.path().filename().string()));
    errno = 0;
    const int cur = getpriority(PRIO_PROCESS, tid);  // a TID: Linux keeps nice per thread
    if (cur == -1 && errno != 0) continue;           // the thread ended meanwhile
    if (cur >= target) continue;
    if (setpriority(PRIO_PROCESS, tid, target) == 0) {
      ++n_changed;
    } else if (why) {
      *why = std::string("setpriority: ") + std::strerror(errno);
    }
  }
  return n_changed;
}

}  // namespace agentq::util
