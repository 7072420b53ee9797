// libFuzzer target: a POST /v1/files body through the Batch upload's parsers (api/batch_input.h):
// the streaming multipart parser (boundary "B") fed in pieces whose sizes come from the input's
// first byte, and the JSONL checker over the "file" part's bytes, also fed in pieces. Invariants:
// no crash or sanitizer report; the parts' bytes are identical whether fed at once or in pieces,
// and so is the checker's verdict (line and message).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/batch_input.h"

using namespace agentq;

namespace {

struct outcome {
  bool ok = false;
  std::string error;
  std::vector<std::pair<std::string, std::string>> parts;
  bool lines_ok = false;
  std::string lines_error;
  int64_t n_requests = 0;
};

outcome run(std::string_view body, size_t piece) {
  outcome o;
  api::jsonl_checker lines(256, nullptr);
  bool in_file = false;
  api::multipart_parser p("B", {[&](const std::string& name, const std::string&) {
                                  o.parts.emplace_back(name, "");
                                  in_file = name == "file";
                                  return true;
                                },
                                [&](std::string_view d) {
                                  o.parts.back().second.append(d);
                                  if (in_file) lines.feed(d);
                                  return true;
                                },
                                [&] {
                                  in_file = false;
                                  return true;
                                }});
  bool fed = true;
  for (size_t i = 0; fed && i < body.size(); i += piece) fed = p.feed(body.substr(i, piece));
  o.ok = fed && p.finish();
  o.error = p.error();
  o.lines_ok = lines.finish();
  o.lines_error = lines.error();
  o.n_requests = lines.n_requests();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t piece = 1 + data[0] % 17;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  outcome whole = run(body, body.size() + 1);
  outcome split = run(body, piece);
  if (whole.ok != split.ok || whole.parts != split.parts || whole.lines_ok != split.lines_ok ||
      whole.lines_error != split.lines_error || whole.n_requests != split.n_requests)
    std::abort();
  (void)api::multipart_boundary(body.substr(0, 120));
  return 0;
}
