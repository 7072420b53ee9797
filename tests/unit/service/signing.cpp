// Standard Webhooks signing: the spec's published test vector, verification and tolerance.
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "util/crypto.h"
#include "webhooks/signing.h"

using namespace agentq;

TEST_CASE("standard webhooks test vector") {
  auto sig = webhooks::sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                            R"({"test": 2432232314})");
  REQUIRE(sig);
  CHECK(*sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST_CASE("verify accepts the vector, rejects tampering and stale timestamps") {
  const char* secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const char* id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
  const char* body = R"({"test": 2432232314})";
  const char* good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
  CHECK(webhooks::verify(secret, id, "1614265330", body, good, 1614265330) == webhooks::verify_result::ok);
  CHECK(webhooks::verify(secret, id, "1614265330", body, std::string("v1,bogus ") + good, 1614265330) ==
        webhooks::verify_result::ok);
  CHECK(webhooks::verify(secret, id, "1614265330", R"({"test": 2432232315})", good, 1614265330) ==
        webhooks::verify_result::no_match);
  CHECK(webhooks::verify(secret, "msg_other", "1614265330", body, good, 1614265330) ==
        webhooks::verify_result::no_match);
  CHECK(webhooks::verify(secret, id, "1614265330", body, good, 1614265330 + 301) ==
        webhooks::verify_result::stale_timestamp);
  CHECK(webhooks::verify(secret, id, "16142x", body, good, 1614265330) == webhooks::verify_result::bad_timestamp);
  CHECK(webhooks::verify("whsec_!!!", id, "1614265330", body, good, 1614265330) ==
        webhooks::verify_result::bad_secret);
  CHECK(webhooks::verify(secret, id, "1614265330", body, "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
                         1614265330) == webhooks::verify_result::no_match);
}

TEST_CASE("generated secrets round-trip") {
  std::string s = webhooks::generate_secret();
  CHECK(s.starts_with("whsec_"));
  auto key = webhooks::decode_secret(s);
  REQUIRE(key);
  CHECK(key->size() == 32);
  CHECK(webhooks::generate_secret() != s);
  auto h = webhooks::make_headers(s, "msg_1", 1700000000, "{}");
  REQUIRE(h);
  CHECK(h->id == "msg_1");
  CHECK(h->timestamp == "1700000000");
  CHECK(webhooks::verify(s, "msg_1", "1700000000", "{}", h->signature, 1700000000) == webhooks::verify_result::ok);
}

TEST_CASE("base64 and sha256") {
  CHECK(crypto::base64_encode("") == "");
  CHECK(crypto::base64_encode("f") == "Zg==");
  CHECK(crypto::base64_encode("fo") == "Zm8=");
  CHECK(crypto::base64_encode("foo") == "Zm9v");
  CHECK(*crypto::base64_decode("Zm9vYg==") == "foob");
  CHECK_FALSE(crypto::base64_decode("Zm9"));
  CHECK_FALSE(crypto::base64_decode("Z=9v"));
  CHECK(crypto::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(crypto::random_token(20).size() == 32);
}

TEST_CASE("sha256: the fetched digest and per-thread context give the known values, again and from many threads") {
  // crypto::sha256 keeps one fetched SHA-256 and a context per thread (session 23): reused contexts
  // must not carry state from one hash to the next.
  const std::string empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  const std::string million_a = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (crypto::sha256_hex("abc") != abc) bad++;
        if (crypto::sha256_hex("") != empty) bad++;
      }
      if (crypto::sha256_hex(std::string(1000000, 'a')) != million_a) bad++;
    });
  for (auto& t : ts) t.join();
  CHECK(bad == 0);
  CHECK(crypto::sha256_hex("") == empty);
}
