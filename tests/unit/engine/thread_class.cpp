// Thread priority classes (agentq/thread_class.h): with an increment set, a throughput thread
// raises its own nice value when it names itself, a handoff thread by half the increment, a latency
// thread keeps the process's, and a thread started by a throughput thread inherits its value (how
// --worker-nice reaches job threads).
#include <agentq/thread_class.h>
#include <doctest/doctest.h>

#include <thread>

using namespace agentq;

TEST_CASE("throughput threads run at the process's nice plus the increment; latency threads do not") {
  const int32_t base = util::thread_nice();
  if (base > 14) {
    MESSAGE("skipped: this process already runs at nice " << base);
    return;
  }
  util::set_throughput_nice(5);
  int32_t latency = -1, throughput = -1, inherited = -1, handoff = -1;
  std::thread([&] {
    util::name_thread("t-latency");
    latency = util::thread_nice();
  }).join();
  std::thread([&] {
    util::name_thread("t-handoff", util::thread_class::handoff);
    handoff = util::thread_nice();
  }).join();
  std::thread([&] {
    util::name_thread("t-throughput", util::thread_class::throughput);
    throughput = util::thread_nice();
    std::thread([&] { inherited = util::thread_nice(); }).join();
  }).join();
  CHECK(latency == base);
  CHECK(handoff == base + 2);  // half the increment, rounded down
  CHECK(throughput == base + 5);
  CHECK(inherited == base + 5);
  CHECK(util::thread_nice() == base);  // the caller's own is untouched

  util::set_throughput_nice(0);  // off: a throughput or handoff thread keeps the process's value
  std::thread([&] {
    util::name_thread("t-off", util::thread_class::throughput);
    throughput = util::thread_nice();
  }).join();
  std::thread([&] {
    util::name_thread("t-off-h", util::thread_class::handoff);
    handoff = util::thread_nice();
  }).join();
  CHECK(throughput == base);
  CHECK(handoff == base);
}
