// Parsers of a Batch upload (POST /v1/files), fed in chunks so memory stays flat however large
// the file: multipart/form-data (RFC 7578) split into parts, and the JSONL request lines of a
// batch input file checked line by line. No I/O here; the fuzz target drives both (fuzz_svc_batch).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/split_loop.h"

namespace agentq::api {

// The boundary parameter of a multipart/form-data Content-Type; nullopt when the type is another
// or the boundary is missing or malformed (1-70 characters).
std::optional<std::string> multipart_boundary(std::string_view content_type);

// Streaming multipart/form-data parser. feed() bytes as they come, then finish(). Callbacks get each
// part's name and filename (from Content-Disposition), its bytes (possibly in several pieces) and its
// end. false from feed/finish with error() set on malformed input; a callback returning false stops
// the parse (error() then holds what the callback set with fail()).
class multipart_parser {
 public:
  struct handlers {
    std::function<bool(const std::string& name, const std::string& filename)> on_part;
    std::function<bool(std::string_view data)> on_data;
    std::function<bool()> on_part_end;
  };
  multipart_parser(std::string boundary, handlers h);
  bool feed(std::string_view data);
  bool finish();  // the closing boundary must have been seen
  const std::string& error() const { return error_; }
  void fail(std::string why) { error_ = std::move(why); }

 private:
  enum class state { preamble, after_boundary, headers, body, done };
  bool step();
  bool parse_headers(std::string_view head);
  std::string delim_;   // "\r\n--" + boundary
  handlers h_;
  state st_ = state::preamble;
  std::string buf_;
  std::string error_;
  bool failed_ = false;
};

// One request line of a batch input file, checked for shape.
struct batch_request_line {
  std::string custom_id;
  std::string method;   // POST
  std::string url;      // /v1/responses | /v1/chat/completions | /v1/jobs
  nlohmann::json body;  // an object
};

// The endpoints a batch may name.
bool is_batch_endpoint(std::string_view url);

// Parse and check one line (without its newline): a JSON object with custom_id (a non-empty string of
// at most 512 characters), method "POST", url (a batch endpoint) and body (an object); no other keys.
// nullopt with *why (naming the field) otherwise.
std::optional<batch_request_line> parse_batch_line(std::string_view line, std::string* why, std::string* param);

// Splits a stream into lines and checks each (parse_batch_line, custom_id unique in the file, at most
// max_line_bytes per line, the same url on every line), handing each good line to on_line (which may
// refuse it: return a message). Blank lines are skipped. The first error stops it: error() is
// "line N: ..." and error_line() is N (1-based).
// NOTE: lines are checked a group at a time (up to k_group_lines lines or k_group_bytes bytes),
// parsed and handed to on_line by two threads (util::split_loop: the caller's and aq-upload-check)
// and then judged in line order, so the verdict is the one-line-at-a-time verdict; on_line must be
// safe on two threads at once, and may see lines after the first bad one (its answer is unused).
class jsonl_checker {
 public:
  // on_line gets the line's text too; what it leaves in *out for a line that passes is handed to
  // on_good, in line order, once the line is judged good (the upload's mapped lines).
  using line_fn = std::function<std::optional<std::string>(int64_t line_no, std::string_view text,
                                                           batch_request_line& line, std::string* param,
                                                           std::string* out)>;
  using good_fn = std::function<void(std::string&& out)>;
  static constexpr size_t k_group_lines = 512, k_group_bytes = size_t(4) << 20;
  jsonl_checker(size_t max_line_bytes, line_fn on_line, good_fn on_good = {});
  ~jsonl_checker();
  bool feed(std::string_view data);
  bool finish();
  int64_t n_requests() const { return n_requests_; }
  const std::string& url() const { return url_; }
  const std::string& error() const { return error_; }
  const std::string& error_param() const { return param_; }
  int64_t error_line() const { return error_line_; }

 private:
  struct pending_line;
  bool line(std::string_view l);
  bool check_pending();
  bool fail(int64_t line_no, std::string why, std::string param);
  size_t max_line_bytes_;
  line_fn on_line_;
  good_fn on_good_;
  std::string partial_;
  int64_t line_no_ = 0, n_requests_ = 0, error_line_ = 0;
  std::string url_, error_, param_;
  std::unordered_set<std::string> custom_ids_;
  bool failed_ = false;
  std::vector<pending_line> pending_;
  size_t pending_bytes_ = 0;
  util::split_loop split_{"aq-upload-check"};  // its thread starts with the first group worth two
};

}  // namespace agentq::api
