// Thread names and priority classes. Every long-lived thread names itself (per-thread profiles,
// scripts/bench/futex_by_thread.sh); the job-running threads (engine loop and pool, the worker's
// job threads and job-end grouping) are throughput work and, with agentqd's --worker-nice, run at a
// higher nice value than the latency work (HTTP io threads, the store's writer, the worker's
// dispatcher), so on a busy host a submit never waits behind a model step for a CPU.
#pragma once

#include <cstdint>

namespace agentq::util {

enum class thread_class { latency, throughput };

// Nice increment over the process's own for throughput threads started from now on (0 = off,
// at most 19 in all). NOTE: set once at startup, before any engine or worker thread exists: a
// thread takes its class when it names itself, and raising a nice value cannot be undone without
// privilege.
void set_throughput_nice(int32_t increment);

// Names the calling thread (at most 15 characters) and, for a throughput thread with an increment
// set, raises its own nice value (Linux keeps nice per thread; threads it starts inherit it).
void name_thread(const char* name, thread_class cls = thread_class::latency);

// The calling thread's nice value (tests).
int32_t thread_nice();

}  // namespace agentq::util
