// Text chart of a job timeline (see timeline_chart.h).
#include "client/timeline_chart.h"

#include <algorithm>
#include <cstdio>

namespace agentq::client {

using json = nlohmann::json;

namespace {

std::string fmt_duration(int64_t ms) {
  char buf[32];
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%lld ms", (long long)ms);
  else if (ms < 60000)
    std::snprintf(buf, sizeof buf, "%.2f s", double(ms) / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.1f min", double(ms) / 60000);
  return buf;
}

int64_t int_or(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : fallback;
}

}  // namespace

std::string render_timeline(const json& t, int32_t width, int64_t now_ms) {
  width = std::max(width, 10);
  int64_t t0 = int_or(t, "created_ms", now_ms);
  int64_t t1 = int_or(t, "finished_ms", now_ms);
  const json spans = t.value("spans", json::array()), marks = t.value("marks", json::array());
  for (const auto& s : spans) t1 = std::max(t1, int_or(s, "end_ms", now_ms));
  int64_t total = std::max<int64_t>(1, t1 - t0);

  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%s  %s  %s from submission to %s\n", t.value("job_id", "?").c_str(),
                t.value("status", "?").c_str(), fmt_duration(t1 - t0).c_str(),
                t.contains("finished_ms") && t["finished_ms"].is_number() ? "finish" : "now");
  out += line;
  std::snprintf(line, sizeof line, "  %-11s %9s %9s  %-*s  %s\n", "span", "start", "duration", width + 2, "", "label");
  out += line;
  for (const auto& s : spans) {
    int64_t a = int_or(s, "start_ms", t0), b = int_or(s, "end_ms", now_ms);
    bool open = !s.contains("end_ms") || !s["end_ms"].is_number();
    // Columns [c0, c1) of the bar; at least one so short spans stay visible.
    int c0 = int(std::clamp<int64_t>((a - t0) * width / total, 0, width - 1));
    int c1 = int(std::clamp<int64_t>((b - t0) * width / total, c0 + 1, width));
    std::string bar(size_t(width), ' ');
    for (int i = c0; i < c1; ++i) bar[size_t(i)] = open ? '>' : '#';
    std::snprintf(line, sizeof line, "  %-11s %9s %9s  |%s|  %s\n", s.value("kind", "?").c_str(),
                  ("+" + fmt_duration(a - t0)).c_str(), (fmt_duration(b - a) + (open ? "+" : "")).c_str(), bar.c_str(),
                  s.value("label", "").c_str());
    out += line;
  }
  if (!marks.empty()) out += "  marks:\n";
  for (const auto& m : marks) {
    std::snprintf(line, sizeof line, "  %9s  %-16s %s\n", ("+" + fmt_duration(int_or(m, "at_ms", t0) - t0)).c_str(),
                  m.value("kind", "?").c_str(), m.value("label", "").c_str());
    out += line;
  }
  return out;
}

}  // namespace agentq::client
