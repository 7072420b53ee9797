// Text exposition and JSON (de)serialisation of metric families (see exposition.h).
#include "metrics/exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace agentq::metrics {

using json = nlohmann::json;

namespace {

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Label values escape \ " and newline; HELP text escapes \ and newline.
std::string escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string label_text(const label_list& labels, const std::string& le = {}) {
  if (labels.empty() && le.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ",") + k + "=\"" + escape(v, true) + "\"";
    first = false;
  }
  if (!le.empty()) out += std::string(first ? "" : ",") + "le=\"" + le + "\"";
  return out + "}";
}

}  // namespace

std::string render(const std::vector<family>& families) {
  std::string out;
  for (const auto& f : families) {
    out += "# HELP " + f.name + " " + escape(f.help, false) + "\n";
    out += "# TYPE " + f.name + " " + to_string(f.type) + "\n";
    for (const auto& s : f.samples) {
      if (f.type != metric_type::histogram) {
        out += f.name + label_text(s.labels) + " " + format_value(s.value) + "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cumulative += i < s.bucket_counts.size() ? s.bucket_counts[i] : 0;
        out += f.name + "_bucket" + label_text(s.labels, format_value(f.bounds[i])) + " " + std::to_string(cumulative) +
               "\n";
      }
      out += f.name + "_bucket" + label_text(s.labels, "+Inf") + " " + std::to_string(s.count) + "\n";
      out += f.name + "_sum" + label_text(s.labels) + " " + format_value(s.sum) + "\n";
      out += f.name + "_count" + label_text(s.labels) + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

std::vector<family> merge(std::vector<family> families) {
  std::stable_sort(families.begin(), families.end(), [](const family& a, const family& b) { return a.name < b.name; });
  std::vector<family> out;
  for (auto& f : families) {
    if (!out.empty() && out.back().name == f.name) {
      // NOTE: a histogram merged with other bounds would be inconsistent; keep the first's samples only.
      if (out.back().type == f.type && out.back().bounds == f.bounds)
        for (auto& s : f.samples) out.back().samples.push_back(std::move(s));
      continue;
    }
    out.push_back(std::move(f));
  }
  return out;
}

void add_label(std::vector<family>& families, const std::string& name, const std::string& value) {
  for (auto& f : families)
    for (auto& s : f.samples) s.labels.insert(s.labels.begin(), {name, value});
}

json to_json(const std::vector<family>& families) {
  json arr = json::array();
  for (const auto& f : families) {
    json samples = json::array();
    for (const auto& s : f.samples) {
      json labels = json::array();
      for (const auto& [k, v] : s.labels) labels.push_back({k, v});
      json js = {{"labels", labels}};
      if (f.type == metric_type::histogram) {
        js["buckets"] = s.bucket_counts;
        js["sum"] = s.sum;
        js["count"] = s.count;
      } else {
        js["value"] = s.value;
      }
      samples.push_back(std::move(js));
    }
    arr.push_back(
        {{"name", f.name}, {"help", f.help}, {"type", to_string(f.type)}, {"bounds", f.bounds}, {"samples", samples}});
  }
  return arr;
}

std::vector<family> from_json(const json& j) {
  std::vector<family> out;
  if (!j.is_array()) return out;
  for (const auto& jf : j) {
    try {
      family f;
      f.name = jf.at("name").get<std::string>();
      f.help = jf.value("help", "");
      std::string t = jf.value("type", "gauge");
      f.type = t == "counter" ? metric_type::counter : t == "histogram" ? metric_type::histogram : metric_type::gauge;
      f.bounds = jf.value("bounds", std::vector<double>{});
      for (const auto& js : jf.at("samples")) {
        sample s;
        for (const auto& l : js.at("labels"))
          s.labels.emplace_back(l.at(0).get<std::string>(), l.at(1).get<std::string>());
        if (f.type == metric_type::histogram) {
          s.bucket_counts = js.at("buckets").get<std::vector<uint64_t>>();
          s.sum = js.at("sum").get<double>();
          s.count = js.at("count").get<uint64_t>();
        } else {
          s.value = js.at("value").get<double>();
        }
        f.samples.push_back(std::move(s));
      }
      out.push_back(std::move(f));
    } catch (const json::exception&) {
      continue;  // one bad family does not hide the others
    }
  }
  return out;
}

}  // namespace agentq::metrics
