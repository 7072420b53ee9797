// Thread names and priority classes. Every long-lived thread names itself (per-thread profiles,
// scripts/bench/futex_by_thread.sh); the job-running threads (engine loop and pool, the worker's
// job threads and job-end grouping) are throughput work and, with agentqd's --worker-nice, run at a
// higher nice value than the latency work (HTTP io threads, the store's writer), so on a busy host a submit never waits behind a model step for a CPU. The
// worker's dispatcher, which hands every claimed job to the engine, runs between the two
// (handoff: half the increment): niced as the engine it waited for a CPU ~3x its own CPU time
// per Batch line while freed slots stayed empty; at the latency threads' value it took the CPU
// from a Batch file's acceptance (-10 % lines/s). Session 36, docs/queue_perf.md.
#pragma once

#include <cstdint>

namespace agentq::util {

enum class thread_class { latency, handoff, throughput };

// Nice increment over the process's own for throughput threads started from now on, and half of
// it (rounded down) for handoff threads (0 = off, at most 19 in all). NOTE: set once at startup, before any engine or worker thread exists: a
// thread takes its class when it names itself, and raising a nice value cannot be undone without
// privilege.
void set_throughput_nice(int32_t increment);

// Names the calling thread (at most 15 characters) and, for a throughput or handoff thread with an
// increment set, raises its own nice value (Linux keeps nice per thread; threads it starts inherit it).
void name_thread(const char* name, thread_class cls = thread_class::latency);

// The calling thread's nice value (tests).
int32_t thread_nice();

}  // namespace agentq::util
