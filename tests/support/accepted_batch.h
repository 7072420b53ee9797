// A batch accepted as the API's acceptance leaves it, for tests of what runs batches after that
// (unit.batch_feeder, unit.batch_runner): the batch row and its n lines' jobs in one chunk; or only
// the new batch row (unit.batch_accept_rows).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "store/batch_store.h"

namespace agentq::test {

// A new /v1/chat/completions batch row for tenant (key "key_<tenant>"), `validating`, no lines yet.
inline store::batch_row created_batch(store::batch_store& batches, const std::string& tenant) {
  store::batch_row b;
  b.tenant = tenant;
  b.key_id = "key_" + tenant;
  b.endpoint = "/v1/chat/completions";
  b.input_file_id = "file-x";
  b.completion_window = "24h";
  b.expires_ms = batches.now() + 86400000;
  auto made = batches.create_batch(b);
  REQUIRE(made);
  return *made;
}

// A /v1/chat/completions batch of n lines for tenant (key "key_<tenant>"), still `validating`;
// lines whose index is in refused were refused at acceptance (an error, no job).
inline store::batch_row accepted_batch(store::batch_store& batches, const std::string& tenant, int64_t n,
                                       const std::vector<int64_t>& refused = {}) {
  const store::batch_row made = created_batch(batches, tenant);
  std::vector<store::batch_line> lines;
  for (int64_t i = 0; i < n; ++i) {
    store::batch_line l;
    l.line_idx = i;
    l.custom_id = "r" + std::to_string(i);
    if (std::find(refused.begin(), refused.end(), i) != refused.end())
      l.error_json = R"({"code":"invalid_request","message":"bad line"})";
    else
      l.request_json = R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})";
    lines.push_back(std::move(l));
  }
  REQUIRE(batches.accept_chunk(made, lines, n, store::job_priority::batch));
  return made;
}

}  // namespace agentq::test
