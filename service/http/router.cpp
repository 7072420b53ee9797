// Router: segment-wise pattern match, 404/405 (see router.h).
#include "http/router.h"

#include "http/errors.h"

namespace agentq::http {

namespace {
std::vector<std::string_view> split(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}
}  // namespace

void router::add(std::string method, std::string pattern, handler fn) {
  routes_.push_back(route{std::move(method), std::move(pattern), std::move(fn)});
}

bool router::match(const std::string& pattern, const std::string& path,
                   std::vector<std::pair<std::string, std::string>>* params) {
  // NOTE: a trailing slash is a different path ("/v1/jobs/" is 404), as in most APIs.
  if (path.empty() || path[0] != '/' || (path.size() > 1 && path.back() == '/')) return false;
  if (path.find("//") != std::string::npos) return false;
  auto p = split(pattern), s = split(path);
  if (p.size() != s.size()) return false;
  std::vector<std::pair<std::string, std::string>> caught;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].size() > 2 && p[i].front() == '{' && p[i].back() == '}') {
      caught.emplace_back(std::string(p[i].substr(1, p[i].size() - 2)), percent_decode(s[i]));
    } else if (p[i] != s[i]) {
      return false;
    }
  }
  if (params) *params = std::move(caught);
  return true;
}

response router::dispatch(request& req) const {
  std::string allow;
  for (const route& r : routes_) {
    std::vector<std::pair<std::string, std::string>> params;
    if (!match(r.pattern, req.path, &params)) continue;
    if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) {
      req.path_params = std::move(params);
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
