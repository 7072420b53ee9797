// Log line formatters (see log_format.h).
#include "obs/log_format.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/pattern_formatter.h>

#include <cctype>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

namespace agentq::obs {

namespace {

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}
bool b64_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=';
}

// Length of the run of chars satisfying pred starting at i.
template <class P>
size_t run_length(std::string_view s, size_t i, P pred) {
  size_t j = i;
  while (j < s.size() && pred(s[j])) ++j;
  return j - i;
}

bool word_start(std::string_view s, size_t i) {
  return i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1]));
}

class scrubbing_formatter final : public spdlog::formatter {
 public:
  explicit scrubbing_formatter(log_format f) : format_(f), text_(std::make_unique<spdlog::pattern_formatter>()) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string text = scrub_secrets(std::string_view(msg.payload.data(), msg.payload.size()));
    if (format_ == log_format::text) {
      spdlog::details::log_msg copy = msg;
      copy.payload = text;
      text_->format(copy, dest);
      return;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    std::time_t secs = std::time_t(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[64];
    std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
    auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json j = {{"ts", ts},
                        {"level", std::string(level.data(), level.size())},
                        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
                        {"msg", text}};
    if (std::string id = find_job_id(text); !id.empty()) j["job_id"] = id;
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<scrubbing_formatter>(format_); }

 private:
  log_format format_;
  std::unique_ptr<spdlog::pattern_formatter> text_;
};

}  // namespace

std::optional<log_format> parse_log_format(std::string_view s) {
  if (s == "text") return log_format::text;
  if (s == "json") return log_format::json;
  return std::nullopt;
}

std::unique_ptr<spdlog::formatter> make_log_formatter(log_format f) {
  return std::make_unique<scrubbing_formatter>(f);
}

std::string scrub_secrets(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (word_start(s, i) && s.substr(i, 3) == "aq_" && run_length(s, i + 3, token_char) >= 16) {
      out += "aq_[redacted]";
      i += 3 + run_length(s, i + 3, token_char);
    } else if (word_start(s, i) && s.substr(i, 6) == "whsec_" && run_length(s, i + 6, b64_char) >= 8) {
      out += "whsec_[redacted]";
      i += 6 + run_length(s, i + 6, b64_char);
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string find_job_id(std::string_view s) {
  for (size_t i = s.find("job_"); i != std::string_view::npos; i = s.find("job_", i + 1)) {
    if (!word_start(s, i)) continue;
    size_t n = run_length(s, i + 4, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
    if (n == 24 && (i + 28 == s.size() || !std::isalnum(static_cast<unsigned char>(s[i + 28]))))
      return std::string(s.substr(i, 28));
  }
  return "";
}

}  // namespace agentq::obs
