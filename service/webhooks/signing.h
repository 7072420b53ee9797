// Standard Webhooks signatures (https://www.standardwebhooks.com): the
// webhook-id / webhook-timestamp / webhook-signature headers, HMAC-SHA256 over
// "id.timestamp.body" with a "whsec_<base64 key>" secret. Used for webhooks and
// for server-side (http) tool calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agentq::webhooks {

// The three headers a signed request carries.
struct signed_headers {
  std::string id;         // webhook-id: stable across retries of one message
  std::string timestamp;  // webhook-timestamp: unix seconds, decimal
  std::string signature;  // webhook-signature: "v1,<base64>"
};

// A fresh secret: "whsec_" + base64 of 32 random bytes.
std::string generate_secret();

// The raw HMAC key inside a "whsec_..." secret (the prefix is optional, as in
// the reference libraries); nullopt if the base64 is malformed or empty.
std::optional<std::string> decode_secret(std::string_view secret);

// "v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>"; nullopt if the secret is malformed.
std::optional<std::string> sign(std::string_view secret, std::string_view msg_id, int64_t timestamp,
                                std::string_view body);

// Headers for one delivery attempt of message msg_id at time timestamp (unix seconds).
std::optional<signed_headers> make_headers(std::string_view secret, std::string_view msg_id, int64_t timestamp,
                                           std::string_view body);

enum class verify_result { ok, bad_secret, bad_timestamp, stale_timestamp, no_match };
const char* to_string(verify_result r);

// Verify a received request: the webhook-signature header may list several
// space-separated "v1,<sig>" entries (key rotation); any match passes.
// tolerance_s bounds |now - timestamp| (replay protection); now = unix seconds.
verify_result verify(std::string_view secret, std::string_view msg_id, std::string_view timestamp,
                     std::string_view body, std::string_view signature_header, int64_t now,
                     int64_t tolerance_s = 300);

}  // namespace agentq::webhooks
