// Thread names and priority classes (see thread_class.h).
#include <agentq/thread_class.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace agentq::util {

namespace {
std::atomic<int32_t> g_throughput_nice{-100};  // the target nice value; -100 = off
std::atomic<int32_t> g_handoff_nice{-100};     // the handoff class's

id_t this_tid() {
  return id_t(syscall(SYS_gettid));
}
}  // namespace

void set_throughput_nice(int32_t increment) {
  if (increment <= 0) {
    g_throughput_nice.store(-100);
    g_handoff_nice.store(-100);
    return;
  }
  errno = 0;
  int base = getpriority(PRIO_PROCESS, id_t(getpid()));  // the main thread's: the process as started
  if (base == -1 && errno != 0) base = 0;
  g_throughput_nice.store(std::min(19, base + increment));
  g_handoff_nice.store(std::min(19, base + increment / 2));
}

void name_thread(const char* name, thread_class cls) {
  pthread_setname_np(pthread_self(), name);
  if (cls == thread_class::latency) return;
  const int32_t target = (cls == thread_class::throughput ? g_throughput_nice : g_handoff_nice).load();
  if (target == -100) return;
  if (thread_nice() >= target) return;            // inherited already
  setpriority(PRIO_PROCESS, this_tid(), target);  // NOTE: best effort: a failure leaves it as it was
}

int32_t thread_nice() {
  errno = 0;
  const int n = getpriority(PRIO_PROCESS, this_tid());
  return n == -1 && errno != 0 ? 0 : n;
}

}  // namespace agentq::util
