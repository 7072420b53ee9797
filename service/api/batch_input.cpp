// Streaming multipart/form-data and batch JSONL parsers (see batch_input.h).
#include "api/batch_input.h"

#include <algorithm>
#include <cctype>

#include "api/validate.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {

constexpr size_t k_max_part_head = 16 << 10;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// `key=value` or `key="value"` parameters after the first ';' of a header value.
std::optional<std::string> header_param(std::string_view value, std::string_view key) {
  size_t pos = value.find(';');
  while (pos != std::string_view::npos) {
    std::string_view rest = value.substr(pos + 1);
    size_t eq = rest.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::string k = lower(trim(rest.substr(0, eq)));
    std::string_view v = trim(rest.substr(eq + 1));
    std::string out;
    size_t used = 0;
    if (!v.empty() && v.front() == '"') {
      size_t i = 1;
      for (; i < v.size() && v[i] != '"'; ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        out += v[i];
      }
      if (i >= v.size()) return std::nullopt;  // unterminated quote
      used = i + 1;
    } else {
      used = std::min(v.find(';'), v.size());
      out = std::string(trim(v.substr(0, used)));
    }
    if (k == key) return out;
    std::string_view after = v.substr(used);
    size_t next = after.find(';');
    if (next == std::string_view::npos) return std::nullopt;
    value = after.substr(next);
    pos = 0;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  std::string media = lower(trim(content_type.substr(0, content_type.find(';'))));
  if (media != "multipart/form-data") return std::nullopt;
  auto b = header_param(content_type, "boundary");
  if (!b || b->empty() || b->size() > 70) return std::nullopt;
  for (char c : *b)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return std::nullopt;
  return b;
}

// --- multipart -------------------------------------------------------------------

multipart_parser::multipart_parser(std::string boundary, handlers h)
    : delim_("\r\n--" + boundary), h_(std::move(h)), buf_("\r\n") {}

bool multipart_parser::feed(std::string_view data) {
  if (failed_) return false;
  if (st_ == state::done) return true;  // the epilogue is ignored
  buf_.append(data);
  while (step()) {
  }
  return !failed_;
}

bool multipart_parser::finish() {
  if (failed_) return false;
  if (st_ != state::done) {
    failed_ = true;
    if (error_.empty()) error_ = "the multipart body ends before its closing boundary";
    return false;
  }
  return true;
}

bool multipart_parser::parse_headers(std::string_view head) {
  std::string name, filename;
  bool have_disposition = false;
  while (!head.empty()) {
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    head = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      error_ = "a multipart part has a malformed header line";
      return false;
    }
    if (lower(trim(line.substr(0, colon))) != "content-disposition") continue;
    std::string_view value = trim(line.substr(colon + 1));
    if (lower(trim(value.substr(0, value.find(';')))) != "form-data") {
      error_ = "a multipart part is not form-data";
      return false;
    }
    have_disposition = true;
    name = header_param(value, "name").value_or("");
    filename = header_param(value, "filename").value_or("");
  }
  if (!have_disposition || name.empty()) {
    error_ = "a multipart part has no Content-Disposition name";
    return false;
  }
  if (h_.on_part && !h_.on_part(name, filename)) {
    if (error_.empty()) error_ = "multipart part refused";
    return false;
  }
  return true;
}

// One state's worth of progress over buf_; false when more bytes are needed (or on failure).
bool multipart_parser::step() {
  auto fail_with = [this](const char* why) {
    if (error_.empty()) error_ = why;
    failed_ = true;
    return false;
  };
  switch (st_) {
    case state::preamble: {
      size_t pos = buf_.find(delim_);
      if (pos == std::string::npos) {
        if (buf_.size() > delim_.size()) buf_.erase(0, buf_.size() - delim_.size());
        return false;
      }
      buf_.erase(0, pos + delim_.size());
      st_ = state::after_boundary;
      return true;
    }
    case state::after_boundary: {
      if (buf_.size() < 2) return false;
      if (buf_.compare(0, 2, "--") == 0) {
        st_ = state::done;
        buf_.clear();
        return false;
      }
      if (buf_.compare(0, 2, "\r\n") != 0) return fail_with("malformed multipart boundary line");
      buf_.erase(0, 2);
      st_ = state::headers;
      return true;
    }
    case state::headers: {
      if (buf_.size() < 2) return false;
      size_t end = 0, skip = 2;  // a part without header lines starts with the blank line
      if (buf_.compare(0, 2, "\r\n") != 0) {
        end = buf_.find("\r\n\r\n");
        // NOTE: the same verdict whatever the read sizes: too large once the head cannot end in bounds
        if (end == std::string::npos) {
          if (buf_.size() > k_max_part_head + 4) return fail_with("a multipart part's headers are too large");
          return false;
        }
        if (end > k_max_part_head) return fail_with("a multipart part's headers are too large");
        skip = end + 4;
      }
      if (!parse_headers(std::string_view(buf_).substr(0, end))) {
        failed_ = true;
        return false;
      }
      buf_.erase(0, skip);
      st_ = state::body;
      return true;
    }
    case state::body: {
      size_t pos = buf_.find(delim_);
      if (pos == std::string::npos) {
        size_t keep = delim_.size() - 1;
        if (buf_.size() > keep) {
          size_t n = buf_.size() - keep;
          if (h_.on_data && !h_.on_data(std::string_view(buf_).substr(0, n))) {
            failed_ = true;
            if (error_.empty()) error_ = "multipart data refused";
            return false;
          }
          buf_.erase(0, n);
        }
        return false;
      }
      if (pos > 0 && h_.on_data && !h_.on_data(std::string_view(buf_).substr(0, pos))) {
        failed_ = true;
        if (error_.empty()) error_ = "multipart data refused";
        return false;
      }
      if (h_.on_part_end && !h_.on_part_end()) {
        failed_ = true;
        if (error_.empty()) error_ = "multipart part refused";
        return false;
      }
      buf_.erase(0, pos + delim_.size());
      st_ = state::after_boundary;
      return true;
    }
    case state::done: return false;
  }
  return false;
}

// --- JSONL -------------------------------------------------------------------------

bool is_batch_endpoint(std::string_view url) {
  return url == "/v1/responses" || url == "/v1/chat/completions" || url == "/v1/jobs";
}

std::optional<batch_request_line> parse_batch_line(std::string_view line, std::string* why, std::string* param) {
  validation_error err;
  auto j = parse_body(std::string(line), &err);
  auto fail = [&](std::string w, std::string p) -> std::optional<batch_request_line> {
    *why = std::move(w);
    *param = std::move(p);
    return std::nullopt;
  };
  if (!j) return fail(err.message, err.param);
  if (!j->is_object()) return fail("a request line must be a JSON object", "");
  batch_request_line out;
  for (auto it = j->begin(); it != j->end(); ++it) {
    const std::string& k = it.key();
    if (k == "custom_id") {
      if (!it->is_string() || it->get_ref<const std::string&>().empty() || it->get_ref<const std::string&>().size() > 512)
        return fail("'custom_id' must be a non-empty string of at most 512 characters", "custom_id");
      out.custom_id = it->get<std::string>();
    } else if (k == "method") {
      if (!it->is_string() || *it != "POST") return fail("'method' must be \"POST\"", "method");
      out.method = "POST";
    } else if (k == "url") {
      if (!it->is_string() || !is_batch_endpoint(it->get_ref<const std::string&>()))
        return fail("'url' must be /v1/responses, /v1/chat/completions or /v1/jobs", "url");
      out.url = it->get<std::string>();
    } else if (k == "body") {
      if (!it->is_object()) return fail("'body' must be a JSON object", "body");
      out.body = std::move(*it);
    } else {
      return fail("unknown field '" + k + "' (a line has custom_id, method, url and body)", k);
    }
  }
  if (out.custom_id.empty()) return fail("'custom_id' is required", "custom_id");
  if (out.method.empty()) return fail("'method' is required", "method");
  if (out.url.empty()) return fail("'url' is required", "url");
  if (!out.body.is_object()) return fail("'body' is required", "body");
  return out;
}

struct jsonl_checker::pending_line {
  int64_t no = 0;
  bool too_long = false;
  std::string text;
  std::optional<batch_request_line> request;
  std::string why, param;                  // parse_batch_line's refusal
  std::optional<std::string> refused;      // on_line's
  std::string refused_param;
  std::string out;                         // on_line's output, for on_good
};

jsonl_checker::jsonl_checker(size_t max_line_bytes, line_fn on_line, good_fn on_good)
    : max_line_bytes_(max_line_bytes), on_line_(std::move(on_line)), on_good_(std::move(on_good)) {}

jsonl_checker::~jsonl_checker() = default;

bool jsonl_checker::fail(int64_t line_no, std::string why, std::string param) {
  failed_ = true;
  error_line_ = line_no;
  error_ = "line " + std::to_string(line_no) + ": " + why;
  param_ = std::move(param);
  return false;
}

bool jsonl_checker::line(std::string_view l) {
  ++line_no_;
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t'; })) return true;
  pending_line& p = pending_.emplace_back();
  p.no = line_no_;
  if (l.size() > max_line_bytes_) {
    p.too_long = true;
  } else {
    p.text.assign(l);
    pending_bytes_ += l.size();
  }
  if (pending_.size() >= k_group_lines || pending_bytes_ >= k_group_bytes) return check_pending();
  return true;
}

bool jsonl_checker::check_pending() {
  auto check = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      pending_line& p = pending_[i];
      if (p.too_long) continue;
      p.request = parse_batch_line(p.text, &p.why, &p.param);
      if (p.request && on_line_) p.refused = on_line_(p.no, p.text, *p.request, &p.refused_param, &p.out);
    }
  };
  split_.run(pending_.size(), check);  // a group under 64 lines is checked on this thread alone
  // In line order, as one line at a time: the first bad line is the verdict.
  for (pending_line& p : pending_) {
    if (p.too_long) return fail(p.no, "longer than " + std::to_string(max_line_bytes_) + " bytes", "");
    if (!p.request) return fail(p.no, p.why, p.param);
    const batch_request_line& r = *p.request;
    if (url_.empty()) url_ = r.url;
    else if (r.url != url_)
      return fail(p.no, "'url' is " + r.url + " but earlier lines name " + url_ + " (one endpoint per batch)", "url");
    if (!custom_ids_.insert(r.custom_id).second)
      return fail(p.no, "custom_id '" + r.custom_id + "' appears twice (each must be unique in the file)", "custom_id");
    if (p.refused) return fail(p.no, *p.refused, p.refused_param);
    ++n_requests_;
    if (on_good_) on_good_(std::move(p.out));
  }
  pending_.clear();
  pending_bytes_ = 0;
  return true;
}

bool jsonl_checker::feed(std::string_view data) {
  while (!failed_ && !data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + data.size() > max_line_bytes_ + 1) {
        if (!check_pending()) return false;  // an earlier line's error comes first
        ++line_no_;
        return fail(line_no_, "longer than " + std::to_string(max_line_bytes_) + " bytes", "");
      }
      partial_.append(data);
      return true;
    }
    if (partial_.empty()) {
      line(data.substr(0, nl));
    } else {
      partial_.append(data.substr(0, nl));
      std::string l = std::move(partial_);
      partial_.clear();
      line(l);
    }
    data.remove_prefix(nl + 1);
  }
  return !failed_;
}

bool jsonl_checker::finish() {
  if (failed_) return false;
  if (!partial_.empty()) {
    std::string l = std::move(partial_);
    partial_.clear();
    if (!line(l)) return false;
  }
  if (!check_pending()) return false;
  if (n_requests_ == 0) {
    failed_ = true;
    error_ = "the file has no request lines";
    return false;
  }
  return true;
}

}  // namespace agentq::api
