// Method + path-pattern routing ("/v1/jobs/{id}/cancel"): 404 for unknown paths,
// 405 (with Allow) for a known path and another method. The route table is also
// what the OpenAPI test compares against.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "http/message.h"

namespace agentq::http {

using handler = std::function<response(request&)>;

struct route {
  std::string method;
  std::string pattern;   // segments; "{name}" matches one non-empty segment
  handler fn;
};

class router {
 public:
  void add(std::string method, std::string pattern, handler fn);
  // Match, fill request.path_params and run the handler; error responses for no match.
  response dispatch(request& req) const;
  const std::vector<route>& routes() const { return routes_; }

  // true if pattern matches path; params receives the {name} captures.
  static bool match(const std::string& pattern, const std::string& path,
                    std::vector<std::pair<std::string, std::string>>* params);

 private:
  std::vector<route> routes_;
};

}  // namespace agentq::http
