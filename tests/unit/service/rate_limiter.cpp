// Token bucket: burst, refill, Retry-After rounding, independence of keys.
#include <doctest/doctest.h>

#include "auth/rate_limiter.h"

using agentq::auth::rate_limiter;
using namespace std::chrono;

TEST_CASE("burst then limited, refills over time") {
  rate_limiter rl(2.0, 3.0);
  auto t0 = steady_clock::now();
  CHECK(rl.acquire("a", t0) == 0);
  CHECK(rl.acquire("a", t0) == 0);
  CHECK(rl.acquire("a", t0) == 0);
  CHECK(rl.acquire("a", t0) == 1);            // empty: one token in 0.5 s -> Retry-After 1
  CHECK(rl.acquire("b", t0) == 0);            // other keys unaffected
  CHECK(rl.acquire("a", t0 + milliseconds(500)) == 0);
  CHECK(rl.acquire("a", t0 + milliseconds(500)) > 0);
  CHECK(rl.acquire("a", t0 + seconds(100)) == 0);  // capped at burst
  int n_ok = 0;
  for (int i = 0; i < 10; ++i) n_ok += rl.acquire("a", t0 + seconds(100)) == 0;
  CHECK(n_ok == 2);
}

TEST_CASE("slow rates round Retry-After up") {
  rate_limiter rl(0.1, 1.0);
  auto t0 = steady_clock::now();
  CHECK(rl.acquire("k", t0) == 0);
  CHECK(rl.acquire("k", t0) == 10);
  rate_limiter off(0, 0);
  for (int i = 0; i < 100; ++i) CHECK(off.acquire("k", t0) == 0);
}
