// Standard Webhooks signing and verification (see signing.h).
#include "webhooks/signing.h"

#include <charconv>

#include "util/crypto.h"

namespace agentq::webhooks {

namespace {
constexpr std::string_view k_prefix = "whsec_";

std::string signed_content(std::string_view msg_id, std::string_view timestamp, std::string_view body) {
  std::string s;
  s.reserve(msg_id.size() + timestamp.size() + body.size() + 2);
  s.append(msg_id).append(".").append(timestamp).append(".").append(body);
  return s;
}
}  // namespace

std::string generate_secret() { return std::string(k_prefix) + crypto::base64_encode(crypto::random_bytes(32)); }

std::optional<std::string> decode_secret(std::string_view secret) {
  if (secret.starts_with(k_prefix)) secret.remove_prefix(k_prefix.size());
  auto key = crypto::base64_decode(secret);
  if (!key || key->empty()) return std::nullopt;
  return key;
}

std::optional<std::string> sign(std::string_view secret, std::string_view msg_id, int64_t timestamp,
                                std::string_view body) {
  auto key = decode_secret(secret);
  if (!key) return std::nullopt;
  std::string ts = std::to_string(timestamp);
  return "v1," + crypto::base64_encode(crypto::hmac_sha256(*key, signed_content(msg_id, ts, body)));
}

std::optional<signed_headers> make_headers(std::string_view secret, std::string_view msg_id, int64_t timestamp,
                                           std::string_view body) {
  auto sig = sign(secret, msg_id, timestamp, body);
  if (!sig) return std::nullopt;
  return signed_headers{std::string(msg_id), std::to_string(timestamp), std::move(*sig)};
}

const char* to_string(verify_result r) {
  switch (r) {
    case verify_result::ok: return "ok";
    case verify_result::bad_secret: return "bad_secret";
    case verify_result::bad_timestamp: return "bad_timestamp";
    case verify_result::stale_timestamp: return "stale_timestamp";
    case verify_result::no_match: return "no_match";
  }
  return "?";
}

verify_result verify(std::string_view secret, std::string_view msg_id, std::string_view timestamp,
                     std::string_view body, std::string_view signature_header, int64_t now, int64_t tolerance_s) {
  auto key = decode_secret(secret);
  if (!key) return verify_result::bad_secret;
  int64_t ts = 0;
  auto [p, ec] = std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), ts);
  if (ec != std::errc() || p != timestamp.data() + timestamp.size()) return verify_result::bad_timestamp;
  if (ts < now - tolerance_s || ts > now + tolerance_s) return verify_result::stale_timestamp;
  std::string expected = crypto::base64_encode(crypto::hmac_sha256(*key, signed_content(msg_id, timestamp, body)));
  while (!signature_header.empty()) {
    size_t sp = signature_header.find(' ');
    std::string_view entry = signature_header.substr(0, sp);
    signature_header = sp == std::string_view::npos ? std::string_view{} : signature_header.substr(sp + 1);
    if (!entry.starts_with("v1,")) continue;
    if (crypto::constant_time_equal(entry.substr(3), expected)) return verify_result::ok;
  }
  return verify_result::no_match;
}

}  // namespace agentq::webhooks
