// The Batch API's mapping (docs/openai.md "Batch"): a request line's body -> the job spec its
// endpoint's route would store, files and batches -> OpenAI's file and batch objects, and a finished
// line -> its output / error file line ({"id","custom_id","response","error"}).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/validate.h"
#include "store/batch_store.h"
#include "store/store.h"

namespace agentq::api {

// A batch line's body as the job spec url's own route would store it (same validation; refused:
// stream, previous_response_id). nullopt with *err (param inside the body). *store_content: the
// body's store:false.
std::optional<nlohmann::json> batch_line_spec(const std::string& url, const nlohmann::json& body,
                                              const model_catalog& catalog, const net::ssrf_guard& guard,
                                              const validation_limits& limits, validation_error* err,
                                              bool* store_content);

nlohmann::json file_object(const store::file_row& f);
nlohmann::json batch_object(const store::batch_row& b);

// One line of the output (is_error false) or error file for a line whose job finished (job
// non-null) or never ran (refused at acceptance: error_json; or cancelled / expired before a worker
// took it: why = "batch_cancelled" | "batch_expired").
// line: the JSON text of the line (no newline), as nlohmann's dump(-1, ' ', false, replace) writes
// it; a completed /v1/chat/completions or /v1/jobs line is written without a document.
struct output_line {
  std::string line;
  bool is_error = false;
};
output_line batch_output_line(const std::string& endpoint, const store::batch_result& r, const store::job_row* job,
                              const std::vector<store::transcript_row>& transcript, const std::string& why);

}  // namespace agentq::api
