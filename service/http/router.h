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
class blocking_pool;

// Where a route's handler runs once a pool is set (set_pool): on the pool's threads (it may block:
// a store write it waits for, Redis, files) or on the io thread that read the request (it never
// blocks: reads, or a deferred answer such as POST /v1/jobs's). NOTE: pool is the default, so a
// new route is safe for the few io threads unless it says otherwise.
enum class runs_on { pool, io };

struct route {
  std::string method;
  std::string pattern;   // segments; "{name}" matches one non-empty segment
  handler fn;
  runs_on where = runs_on::pool;
};

class router {
 public:
  void add(std::string method, std::string pattern, handler fn, runs_on where = runs_on::pool);
  // Handlers of runs_on::pool routes run on this pool from now on (nullptr, the default: every
  // handler runs on the calling thread, as the tests that call dispatch() directly want).
  void set_pool(blocking_pool* pool) { pool_ = pool; }
  // Match, fill request.path_params and run the handler (or hand it to the pool: a deferred
  // response); error responses for no match.
  response dispatch(request& req) const;
  const std::vector<route>& routes() const { return routes_; }

  // true if pattern matches path; params receives the {name} captures.
  static bool match(const std::string& pattern, const std::string& path,
                    std::vector<std::pair<std::string, std::string>>* params);

 private:
  std::vector<route> routes_;
  blocking_pool* pool_ = nullptr;
};

}  // namespace agentq::http
