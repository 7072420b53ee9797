// Small crypto helpers over OpenSSL: base64, SHA-256, HMAC-SHA256, random tokens.
// Used by webhook signing, API keys and idempotency fingerprints.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace agentq::crypto {

// Standard base64 (RFC 4648, with padding).
std::string base64_encode(std::string_view bytes);
// nullopt if the input is not valid base64 (whitespace not allowed).
std::optional<std::string> base64_decode(std::string_view text);

std::string sha256(std::string_view bytes);            // 32 raw bytes
std::string sha256_hex(std::string_view bytes);        // 64 lowercase hex chars
std::string hmac_sha256(std::string_view key, std::string_view message);  // 32 raw bytes
std::string to_hex(std::string_view bytes);

// n cryptographically random bytes (RAND_bytes); aborts if the RNG fails (broken invariant).
std::string random_bytes(size_t n);
// Random URL-safe token of n_bytes entropy: lowercase base32-ish alphabet [a-z0-9].
std::string random_token(size_t n_bytes);

// Constant-time comparison of two equal-length strings; false if lengths differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace agentq::crypto
