// Store and Redis error counters (see process_metrics.h).
#include "obs/process_metrics.h"

#include "queue/queue.h"
#include "store/store.h"

namespace agentq::obs {

void register_process_metrics(metrics::registry& reg, store::store& st, queue::queue& q) {
  reg.add_collector([&st, &q](std::vector<metrics::family>& out) {
    auto counter = [&out](const char* name, const char* help, double v) {
      metrics::family f;
      f.name = name;
      f.help = help;
      f.type = metrics::metric_type::counter;
      f.samples.push_back(metrics::value_sample({}, v));
      out.push_back(std::move(f));
    };
    auto ss = st.stats();
    auto qs = q.stats();
    counter("agentq_sqlite_errors_total", "Failed SQLite write transactions of the job store.",
            double(ss.n_write_errors));
    counter("agentq_redis_errors_total", "Redis commands that failed (error replies and I/O errors).",
            double(qs.redis.n_errors + qs.redis.n_io_errors));
    counter("agentq_redis_reconnects_total", "Reconnections to Redis.", double(qs.redis.n_reconnects));
  });
}

}  // namespace agentq::obs
