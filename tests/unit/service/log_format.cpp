// agentqd log formats: secrets scrubbed in both formats, JSON lines with a job_id field.
#include "obs/log_format.h"

#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <sstream>

using namespace agentq::obs;

TEST_CASE("scrub_secrets and find_job_id") {
  CHECK(scrub_secrets("key aq_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345 used") == "key aq_[redacted] used");
  CHECK(scrub_secrets("secret=whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IQ==,") == "secret=whsec_[redacted],");
  CHECK(scrub_secrets("call_aq0_1 and aq_short") == "call_aq0_1 and aq_short");  // not key-shaped
  CHECK(find_job_id("worker w: job job_0123456789abcdef01234567 crashed") == "job_0123456789abcdef01234567");
  CHECK(find_job_id("no job_here, job_0123 nor xjob_0123456789abcdef01234567") == "");
}

TEST_CASE("JSON and text loggers") {
  for (auto fmt : {log_format::json, log_format::text}) {
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    spdlog::logger log("t", sink);
    log.set_formatter(make_log_formatter(fmt));
    log.info("worker w1: job {} claimed with key {}", "job_00112233445566778899aabb", "aq_0123456789abcdefghijklmnop");
    log.warn("no job here");
    std::string text = out.str();
    CHECK(text.find("aq_0123456789") == std::string::npos);
    CHECK(text.find("aq_[redacted]") != std::string::npos);
    if (fmt == log_format::text) continue;
    std::istringstream in(text);
    std::string l1, l2;
    std::getline(in, l1);
    std::getline(in, l2);
    auto j1 = nlohmann::json::parse(l1), j2 = nlohmann::json::parse(l2);
    CHECK(j1["job_id"] == "job_00112233445566778899aabb");
    CHECK(j1["level"] == "info");
    CHECK(j1["logger"] == "t");
    CHECK(j1["ts"].get<std::string>().ends_with("Z"));
    CHECK(!j2.contains("job_id"));
    CHECK(j2["level"] == "warning");
  }
}
