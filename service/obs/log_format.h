// agentqd's log line formats for spdlog: text (the default pattern) or JSON, one object per
// line {"ts","level","logger","msg","job_id"?}. Both scrub anything shaped like an API key
// (aq_...) or a webhook secret (whsec_...) from the message as a last line of defence; the
// job_id field is the first job id ("job_" + 24 hex) the message names.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace agentq::obs {

enum class log_format { text, json };
std::optional<log_format> parse_log_format(std::string_view s);

std::unique_ptr<spdlog::formatter> make_log_formatter(log_format f);

// "aq_<16+ chars>" -> "aq_[redacted]", "whsec_<base64>" -> "whsec_[redacted]".
std::string scrub_secrets(std::string_view s);
// The first "job_<24 hex>" in s, or "".
std::string find_job_id(std::string_view s);

}  // namespace agentq::obs
