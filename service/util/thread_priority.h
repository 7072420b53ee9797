// Thread priority classes: the threads that run jobs (engine loop and pool, the worker's dispatcher
// and job threads) are throughput work and may run at a higher nice value than the latency work
// (HTTP io threads, the store's writer) so that a submit never waits behind a model step for a CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace agentq::util {

// The thread names (pthread_setname_np) of the job-running threads that --worker-nice lowers.
const std::vector<std::string>& worker_thread_names();

// Set the nice value of every thread of this process whose name is one of names to the process's
// (its main thread's) plus nice_increment (at most 19); returns how many were changed (-1 and *why when /proc/self/task
// cannot be read). NOTE: raising a nice value needs no privilege (lowering it back does), so this is one-way. Threads
// created later by one of these threads inherit its nice value (Linux: per thread, copied at clone), which is how job
// threads started lazily by the worker's dispatcher get it.
int32_t lower_threads_named(const std::vector<std::string>& names, int32_t nice_increment, std::string* why);

}  // namespace agentq::util
