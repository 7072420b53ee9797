// sentinel:// URLs (#28): the sentinel list (default port 26379, [IPv6], at most 16), the master
// name, the db and the master's credentials; malformed ones are refused saying what is expected,
// never repeating the password.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "queue/redis_url.h"

using agentq::queue::parse_redis_url;

TEST_CASE("sentinel URLs: sentinels, master name, db, credentials") {
  std::string err;
  auto o = parse_redis_url("sentinel://10.0.0.1:26380,10.0.0.2,[::1]:5000/agentq-main", &err);
  REQUIRE_MESSAGE(o, err);
  REQUIRE(o->sentinels.size() == 3);
  CHECK(o->sentinels[0] == std::pair<std::string, int32_t>{"10.0.0.1", 26380});
  CHECK(o->sentinels[1] == std::pair<std::string, int32_t>{"10.0.0.2", 26379});
  CHECK(o->sentinels[2] == std::pair<std::string, int32_t>{"::1", 5000});
  CHECK(o->master_name == "agentq-main");
  CHECK(o->db == 0);
  CHECK(o->password.empty());

  o = parse_redis_url("sentinel://agentq:p%40ss@s1/main_1.x/4", &err);
  REQUIRE_MESSAGE(o, err);
  CHECK(o->sentinels.size() == 1);
  CHECK(o->master_name == "main_1.x");
  CHECK(o->db == 4);
  CHECK(o->username == "agentq");
  CHECK(o->password == "p@ss");

  // a plain redis:// URL has no sentinels
  o = parse_redis_url("redis://h:1", &err);
  REQUIRE(o);
  CHECK(o->sentinels.empty());
  CHECK(o->master_name.empty());

  std::string many = "sentinel://";
  for (int i = 0; i < 17; ++i) many += (i ? ",h" : "h") + std::to_string(i);
  many += "/m";
  for (const std::string& bad : std::vector<std::string>{"sentinel://", "sentinel:///m", "sentinel://h", "sentinel://h/", "sentinel://h,/m",
                                "sentinel://,h/m", "sentinel://h:0/m", "sentinel://h:x/m", "sentinel://h/m/x",
                                "sentinel://h/m/-1", "sentinel://h/m a", "sentinel://h/m%20", "sentinel://[::1/m",
                                "sentinel://h/m?x=1", "sentinel://u:@h/m", many}) {
    CAPTURE(bad);
    err.clear();
    CHECK_FALSE(parse_redis_url(bad, &err));
    CHECK(err.find("sentinel://") != std::string::npos);  // says what is expected
  }
  err.clear();
  CHECK_FALSE(parse_redis_url("sentinel://u:hunter2@h:99999/m", &err));
  CHECK(err.find("hunter2") == std::string::npos);
  CHECK(agentq::queue::redact_redis_url("sentinel://u:hunter2@a,b/m") == "sentinel://u:***@a,b/m");
}
