// Redis URLs with credentials (#28): parsing (user, password, %-escapes, [IPv6], db) and the
// client's AUTH + SELECT against a real redis-server with requirepass and an ACL user.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "queue/queue.h"
#include "queue/redis_client.h"
#include "queue/redis_url.h"
#include "redis_server.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using agentq::queue::parse_redis_url;

TEST_CASE("redis URLs: host, port, user, password, db") {
  std::string err;
  auto o = parse_redis_url("redis://127.0.0.1:6380", &err);
  REQUIRE(o);
  CHECK(o->host == "127.0.0.1");
  CHECK(o->port == 6380);
  CHECK(o->username.empty());
  CHECK(o->password.empty());
  CHECK(o->db == 0);

  o = parse_redis_url("redis://agentq:s3cr%40t%3Ax@redis.internal:7000/3", &err);
  REQUIRE(o);
  CHECK(o->host == "redis.internal");
  CHECK(o->port == 7000);
  CHECK(o->username == "agentq");
  CHECK(o->password == "s3cr@t:x");
  CHECK(o->db == 3);

  o = parse_redis_url("redis://:onlypass@h/", &err);  // requirepass style: AUTH password
  REQUIRE(o);
  CHECK(o->username.empty());
  CHECK(o->password == "onlypass");
  CHECK(o->port == 6379);
  CHECK(o->db == 0);

  o = parse_redis_url("redis://u:p@ss@host:1/2", &err);  // '@' in a password: the last one ends the userinfo
  REQUIRE(o);
  CHECK(o->password == "p@ss");
  CHECK(o->host == "host");

  o = parse_redis_url("redis://[::1]:6390/1", &err);
  REQUIRE(o);
  CHECK(o->host == "::1");
  CHECK(o->port == 6390);
  CHECK(o->db == 1);

  o = parse_redis_url("localhost:6400", &err);  // the old form without a scheme
  REQUIRE(o);
  CHECK(o->host == "localhost");
  CHECK(o->port == 6400);

  for (const char* bad : {"redis://", "redis://:6379", "redis://host:0", "redis://host:65536", "redis://host:x",
                          "redis://host:", "redis://host/abc", "redis://host/-1", "redis://user@host",
                          "redis://u:@host", "redis://u:%zz@host", "redis://u:%4@host", "redis://[::1",
                          "redis://::1:6379", "redis://host?db=1", "http://host", "rediss://u:p@host"}) {
    CAPTURE(bad);
    err.clear();
    CHECK_FALSE(parse_redis_url(bad, &err));
    CHECK(err.find("redis://") != std::string::npos);  // says what is expected
  }
  // An error never repeats the password.
  err.clear();
  CHECK_FALSE(parse_redis_url("redis://u:hunter2@host:99999", &err));
  CHECK(err.find("hunter2") == std::string::npos);
  CHECK(queue::redact_redis_url("redis://u:hunter2@host:1/0") == "redis://u:***@host:1/0");
  CHECK(queue::redact_redis_url("redis://host:1") == "redis://host:1");
}

TEST_CASE("redis AUTH: requirepass, an ACL user, SELECT db; wrong credentials never connect") {
  test::redis_server redis(false);
  // An ACL user limited to agentq's keys, then requirepass for the default user.
  REQUIRE(redis.command({"ACL", "SETUSER", "agentq", "on", ">acl-pass", "~agentq:*", "+@all"}) == "+OK");
  REQUIRE(redis.command({"CONFIG", "SET", "requirepass", "default-pass"}) == "+OK");
  CHECK(redis.command({"PING"}).rfind("-NOAUTH", 0) == 0);  // really protected now

  auto client_for = [&](const std::string& url) {
    std::string err;
    auto o = parse_redis_url(url, &err);
    REQUIRE_MESSAGE(o, err);
    o->backoff_initial_ms = 1;
    o->backoff_max_ms = 1;
    return std::make_unique<queue::redis_client>(*o);
  };
  const std::string hp = "127.0.0.1:" + std::to_string(redis.port());

  SUBCASE("no credentials: Redis refuses every command") {
    auto c = client_for("redis://" + hp);
    auto r = c->command({"PING"});
    CHECK_FALSE(r.ok());
    CHECK(r.str.rfind("NOAUTH", 0) == 0);
  }
  SUBCASE("wrong password / wrong user") {
    for (const std::string& url : {"redis://:nope@" + hp, "redis://agentq:nope@" + hp, "redis://ghost:acl-pass@" + hp}) {
      CAPTURE(url);
      auto c = client_for(url);
      CHECK_FALSE(c->command({"PING"}).ok());
      CHECK_FALSE(c->connected());
    }
  }
  SUBCASE("requirepass: AUTH password, SELECT 5") {
    auto c = client_for("redis://:default-pass@" + hp + "/5");
    REQUIRE(c->command({"SET", "agentq:probe", "x"}).ok());
    CHECK(c->connected());
    auto db0 = client_for("redis://:default-pass@" + hp);
    CHECK(db0->command({"EXISTS", "agentq:probe"}).integer == 0);  // landed in db 5, not 0
    CHECK(c->command({"EXISTS", "agentq:probe"}).integer == 1);
    // The session survives a reconnect: the server drops it, the next command re-authenticates.
    REQUIRE(db0->command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).ok());
    auto r = c->command({"EXISTS", "agentq:probe"});  // io_error on the dead socket
    for (int i = 0; i < 50 && !(r.ok() && r.integer == 1); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // past the reconnect backoff
      r = c->command({"EXISTS", "agentq:probe"});
    }
    CHECK(r.integer == 1);
    CHECK(c->stats().n_reconnects >= 2);
  }
  SUBCASE("ACL user: the queue publishes, reads and acks through AUTH user password") {
    test::temp_dir dir;
    std::string err;
    store::store_options so;
    so.path = dir.file("jobs.db");
    auto db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    queue::queue_options qo;
    qo.redis = *parse_redis_url("redis://agentq:acl-pass@" + hp + "/2", &err);
    queue::queue q(qo, *db);
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = "{}";
    auto id = db->create_job(nj).get().job.id;
    REQUIRE(q.ensure_groups("w1"));
    CHECK(q.relay_once() == 1);
    std::vector<queue::delivery> got;
    for (int i = 0; i < 20 && got.empty(); ++i) got = q.read("w1", 10, 50);
    REQUIRE(got.size() == 1);
    CHECK(got[0].job_id == id);
    CHECK(q.ack(got[0]));
    // The ACL user is confined to agentq:* keys: Redis itself enforces it.
    auto c = client_for("redis://agentq:acl-pass@" + hp + "/2");
    CHECK_FALSE(c->command({"SET", "other:key", "1"}).ok());
    CHECK(c->command({"XLEN", "agentq:jobs:normal"}).ok());
  }
}
