// Router: segment-wise pattern match, 404/405 (see router.h).
#include "http/router.h"

#include "http/blocking_pool.h"
#include "http/errors.h"

namespace agentq::http {

namespace {
// The next non-empty '/'-separated segment of s at or after *at (advancing *at past it); false at
// the end. NOTE: walks the strings in place: matching every route against a path allocated two
// vectors per route before (~45 routes a request, issue 29).
bool next_segment(std::string_view s, size_t* at, std::string_view* seg) {
  size_t i = *at;
  while (i < s.size() && s[i] == '/') ++i;
  if (i == s.size()) return false;
  size_t j = s.find('/', i);
  if (j == std::string_view::npos) j = s.size();
  *seg = s.substr(i, j - i);
  *at = j;
  return true;
}

bool is_capture(std::string_view seg) { return seg.size() > 2 && seg.front() == '{' && seg.back() == '}'; }
}  // namespace

void router::add(std::string method, std::string pattern, handler fn, runs_on where) {
  routes_.push_back(route{std::move(method), std::move(pattern), std::move(fn), where});
}

bool router::match(const std::string& pattern, const std::string& path,
                   std::vector<std::pair<std::string, std::string>>* params) {
  // NOTE: a trailing slash is a different path ("/v1/jobs/" is 404), as in most APIs.
  if (path.empty() || path[0] != '/' || (path.size() > 1 && path.back() == '/')) return false;
  if (path.find("//") != std::string::npos) return false;
  // Segment by segment; the captures are decoded only once the whole path has matched.
  size_t p_at = 0, s_at = 0;
  std::string_view p_seg, s_seg;
  int32_t n_captures = 0;
  for (;;) {
    bool has_p = next_segment(pattern, &p_at, &p_seg), has_s = next_segment(path, &s_at, &s_seg);
    if (has_p != has_s) return false;
    if (!has_p) break;
    if (is_capture(p_seg)) ++n_captures;
    else if (p_seg != s_seg) return false;
  }
  if (!params) return true;
  std::vector<std::pair<std::string, std::string>> caught;
  caught.reserve(size_t(n_captures));
  p_at = s_at = 0;
  while (next_segment(pattern, &p_at, &p_seg) && next_segment(path, &s_at, &s_seg))
    if (is_capture(p_seg)) caught.emplace_back(std::string(p_seg.substr(1, p_seg.size() - 2)), percent_decode(s_seg));
  *params = std::move(caught);
  return true;
}

response router::dispatch(request& req) const {
  std::string allow;
  for (const route& r : routes_) {
    if (!match(r.pattern, req.path, nullptr)) continue;
    if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) {
      match(r.pattern, req.path, &req.path_params);  // the captures, decoded for the one route that runs
      if (pool_ && r.where == runs_on::pool) return pool_->run(req, r.fn);
      return r.fn(req);
    }
    if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.method;
  }
  if (!allow.empty()) {
    response res = error_response(error_kind::method_not_allowed,
                                  "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
    res.headers.emplace_back("Allow", allow);
    return res;
  }
  return error_response(error_kind::not_found, "no route for " + req.method + " " + req.path);
}

}  // namespace agentq::http
