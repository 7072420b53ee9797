// Metric families and the registry (see registry.h).
#include "metrics/registry.h"

#include <algorithm>

#include "metrics/exposition.h"

namespace agentq::metrics {

const char* to_string(metric_type t) {
  switch (t) {
    case metric_type::counter:
      return "counter";
    case metric_type::gauge:
      return "gauge";
    case metric_type::histogram:
      return "histogram";
  }
  return "untyped";
}

const std::vector<double>& latency_buckets() {
  static const std::vector<double> k = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return k;
}

void histogram::observe(double v) {
  std::lock_guard lock(mu_);
  auto it = std::lower_bound(bounds_->begin(), bounds_->end(), v);  // first bound >= v (le semantics)
  if (it != bounds_->end()) ++counts_[size_t(it - bounds_->begin())];
  sum_ += v;
  ++count_;
}

void histogram::snapshot(sample* out) const {
  std::lock_guard lock(mu_);
  out->bucket_counts = counts_;
  out->sum = sum_;
  out->count = count_;
}

namespace {
template <class T>
std::unique_ptr<T> make_series(const std::vector<double>* bounds) {
  if constexpr (std::is_same_v<T, histogram>)
    return std::make_unique<histogram>(bounds);
  else
    return std::make_unique<T>();
}

template <class T>
constexpr metric_type type_of() {
  if constexpr (std::is_same_v<T, counter>) return metric_type::counter;
  if constexpr (std::is_same_v<T, gauge>) return metric_type::gauge;
  return metric_type::histogram;
}
}  // namespace

template <class T>
T& family_of<T>::with(const std::vector<std::string>& values) {
  std::lock_guard lock(mu_);
  auto& slot = series_[values];
  if (!slot) slot = make_series<T>(&bounds_);
  return *slot;
}

template <class T>
void family_of<T>::collect(family* out) const {
  out->name = name_;
  out->help = help_;
  out->type = type_of<T>();
  out->bounds = bounds_;
  std::lock_guard lock(mu_);
  for (const auto& [values, s] : series_) {
    sample smp;
    for (size_t i = 0; i < label_names_.size() && i < values.size(); ++i)
      smp.labels.emplace_back(label_names_[i], values[i]);
    if constexpr (std::is_same_v<T, histogram>)
      s->snapshot(&smp);
    else
      smp.value = s->value();
    out->samples.push_back(std::move(smp));
  }
}

template class family_of<counter>;
template class family_of<gauge>;
template class family_of<histogram>;

namespace {
template <class F, class... A>
F& find_or_add(std::map<std::string, std::unique_ptr<F>>& m, const std::string& name, A&&... args) {
  auto& slot = m[name];
  if (!slot) slot = std::make_unique<F>(name, std::forward<A>(args)...);
  return *slot;
}
}  // namespace

family_of<counter>& registry::counter_family(const std::string& name, const std::string& help,
                                             std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  return find_or_add(counters_, name, help, std::move(label_names));
}

family_of<gauge>& registry::gauge_family(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  std::lock_guard lock(mu_);
  return find_or_add(gauges_, name, help, std::move(label_names));
}

family_of<histogram>& registry::histogram_family(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names, std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  return find_or_add(histograms_, name, help, std::move(label_names), std::move(bounds));
}

void registry::add_collector(collector fn) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(fn));
}

std::vector<family> registry::collect() const {
  std::vector<family> out;
  std::vector<collector> fns;
  {
    std::lock_guard lock(mu_);
    for (auto& [n, f] : counters_) f->collect(&out.emplace_back());
    for (auto& [n, f] : gauges_) f->collect(&out.emplace_back());
    for (auto& [n, f] : histograms_) f->collect(&out.emplace_back());
    fns = collectors_;
  }
  // NOTE: collectors run outside the lock; they may be slow (SQLite) and must not block observe().
  for (auto& fn : fns) fn(out);
  return merge(std::move(out));
}

registry& global() {
  static registry r;
  return r;
}

}  // namespace agentq::metrics
