// API key authentication and its in-memory cache (auth/keys.h): a key is found; a revoke, a secret
// rotation or a retention change made through the same key_store takes effect at once; one made by
// another connection (another process on the same file) is seen within key_store::k_auth_cache_ms.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "auth/keys.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;

namespace {
struct fixture {
  test::temp_dir dir;
  std::string path = dir.file("agentq.db");
  std::unique_ptr<store::store> st;
  std::unique_ptr<auth::key_store> keys;
  fixture() {
    std::string err;
    store::store_options o;
    o.path = path;
    st = store::store::open(o, &err);
    REQUIRE_MESSAGE(st, err);
    keys = auth::key_store::open(path, &err);
    REQUIRE_MESSAGE(keys, err);
  }
};
}  // namespace

TEST_CASE("a cached key: revoke, rotate and retention through the same store take effect at once") {
  fixture f;
  std::string err;
  auto k = f.keys->create("t1", false, &err);
  REQUIRE_MESSAGE(k, err);
  auto a = f.keys->authenticate(k->key);  // read from SQLite, then cached
  REQUIRE(a);
  CHECK(a->id == k->info.id);
  CHECK(a->tenant == "t1");
  REQUIRE(f.keys->authenticate(k->key));  // a hit
  CHECK_FALSE(f.keys->authenticate(k->key + "x"));
  CHECK_FALSE(f.keys->authenticate("short"));

  auto secret = f.keys->rotate_secret(k->info.id);
  REQUIRE(secret);
  auto b = f.keys->authenticate(k->key);
  REQUIRE(b);
  CHECK(b->webhook_secret == *secret);

  REQUIRE(f.keys->set_retention_days(k->info.id, 3));
  auto c = f.keys->authenticate(k->key);
  REQUIRE(c);
  CHECK(c->retention_days == 3);

  REQUIRE(f.keys->revoke(k->info.id));
  CHECK_FALSE(f.keys->authenticate(k->key));  // at once, though it was cached a moment ago
  CHECK_FALSE(f.keys->authenticate(k->key));
}

TEST_CASE("a revoke by another connection is seen within the cache's bound") {
  fixture f;
  std::string err;
  auto k = f.keys->create("t2", false, &err);
  REQUIRE_MESSAGE(k, err);
  REQUIRE(f.keys->authenticate(k->key));
  auto other = auth::key_store::open(f.path, &err);  // as another agentqd, or `agentq keys revoke`, would
  REQUIRE_MESSAGE(other, err);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(other->revoke(k->info.id));
  CHECK_FALSE(other->authenticate(k->key));
  // NOTE: the first store may still answer from its cache, but never past the bound.
  bool gone = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(auth::key_store::k_auth_cache_ms + 500)) {
    if (!f.keys->authenticate(k->key)) {
      gone = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
  CHECK(std::chrono::steady_clock::now() - t0 <= std::chrono::milliseconds(auth::key_store::k_auth_cache_ms + 500));
  CHECK_FALSE(f.keys->authenticate(k->key));
}

TEST_CASE("many keys: the cache stays bounded and every key keeps working") {
  fixture f;
  std::string err;
  std::vector<std::string> ks;
  for (int i = 0; i < 50; ++i) {
    auto k = f.keys->create("t3", false, &err);
    REQUIRE_MESSAGE(k, err);
    ks.push_back(k->key);
  }
  for (int round = 0; round < 3; ++round)
    for (const auto& key : ks) CHECK(f.keys->authenticate(key));
}
