// A small Prometheus-style metrics registry: counter, gauge and histogram families with
// labels, thread-safe, plus scrape-time collectors. Rendering and the JSON form that worker
// processes ship through SQLite live in metrics/exposition.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace agentq::metrics {

enum class metric_type { counter, gauge, histogram };
const char* to_string(metric_type t);

using label_list = std::vector<std::pair<std::string, std::string>>;  // name -> value, in order

// One labelled series of a family, as collected.
struct sample {
  label_list labels;
  double value = 0;                     // counter / gauge
  std::vector<uint64_t> bucket_counts;  // histogram: per bound, NOT cumulative (+Inf bucket = count - sum of these)
  double sum = 0;                       // histogram
  uint64_t count = 0;                   // histogram
};

// A counter/gauge sample.
inline sample value_sample(label_list labels, double value) {
  sample s;
  s.labels = std::move(labels);
  s.value = value;
  return s;
}

struct family {
  std::string name;  // "agentq_http_requests_total"
  std::string help;
  metric_type type = metric_type::gauge;
  std::vector<double> bounds;  // histogram upper bounds, ascending (no +Inf)
  std::vector<sample> samples;
};

// A family of one unlabelled counter or gauge sample (what a collector reports of a figure it reads).
inline family value_family(const char* name, const char* help, metric_type type, double value) {
  family f;
  f.name = name;
  f.help = help;
  f.type = type;
  f.samples.push_back(value_sample({}, value));
  return f;
}

// Bucket bounds for latencies in seconds: 1 ms .. 60 s.
const std::vector<double>& latency_buckets();

class counter {
 public:
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  // Mirror a monotonic count kept elsewhere (engine totals).
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class histogram {
 public:
  explicit histogram(const std::vector<double>* bounds) : bounds_(bounds), counts_(bounds->size(), 0) {}
  void observe(double v);
  void snapshot(sample* out) const;

 private:
  const std::vector<double>* bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// A family of one metric type: with(values) returns the series for those label values
// (created on first use; the reference stays valid for the registry's life).
template <class T>
class family_of {
 public:
  family_of(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        bounds_(std::move(bounds)) {}
  T& with(const std::vector<std::string>& values = {});
  void collect(family* out) const;

 private:
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_;
};

using collector = std::function<void(std::vector<family>& out)>;

class registry {
 public:
  // Register (or find, when already registered) a family. Names follow Prometheus
  // conventions: agentq_ prefix, base units, counters end in _total.
  family_of<counter>& counter_family(const std::string& name, const std::string& help,
                                     std::vector<std::string> label_names = {});
  family_of<gauge>& gauge_family(const std::string& name, const std::string& help,
                                 std::vector<std::string> label_names = {});
  family_of<histogram>& histogram_family(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names = {},
                                         std::vector<double> bounds = latency_buckets());
  // Runs at every collect() (figures read at scrape time: SQLite counts, engine stats).
  void add_collector(collector fn);

  // Every family, sorted by name; families of the same name are merged.
  std::vector<family> collect() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<family_of<counter>>> counters_;
  std::map<std::string, std::unique_ptr<family_of<gauge>>> gauges_;
  std::map<std::string, std::unique_ptr<family_of<histogram>>> histograms_;
  std::vector<collector> collectors_;
};

// The process-wide registry the API process serves (HTTP, webhooks, store errors).
registry& global();

}  // namespace agentq::metrics
