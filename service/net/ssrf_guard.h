// SSRF guard for outbound requests (webhooks, server-side tools): parses a URL,
// rejects odd host forms and non-http(s) schemes, resolves the host and refuses
// any address in a private/special range unless an allow-list CIDR covers it.
// Callers connect to the returned addresses, never re-resolve (no DNS rebinding).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentq::net {

// An IPv4 or IPv6 address in network byte order (IPv4 uses the first 4 bytes).
struct ip_address {
  bool is_v6 = false;
  std::array<uint8_t, 16> bytes{};

  // Strict literal parsing: dotted-quad IPv4 (no leading zeros, no short forms) or IPv6.
  static std::optional<ip_address> parse(std::string_view text);
  std::string to_string() const;
};

struct cidr {
  ip_address base;
  int32_t prefix_len = 0;  // bits

  // "10.0.0.0/8", "::1/128", or a bare address (full length); nullopt if malformed.
  static std::optional<cidr> parse(std::string_view text);
  bool contains(const ip_address& a) const;
};
// "a/8,b/16" -> list; nullopt (and *error) if any entry is malformed.
std::optional<std::vector<cidr>> parse_cidr_list(std::string_view text, std::string* error);

struct parsed_url {
  std::string scheme;  // "http" | "https"
  std::string host;    // lowercase; IPv6 without brackets
  uint16_t port = 0;
  std::string target;  // path + query, at least "/"
  bool host_is_literal = false;
  bool tls() const { return scheme == "https"; }
};

// Syntax-level checks only (no DNS): scheme, userinfo, host form, port.
// nullopt with *error set to a message naming the problem.
std::optional<parsed_url> parse_url(std::string_view url, std::string* error);

struct checked_url {
  parsed_url url;
  std::vector<ip_address> addresses;  // every resolved address, all allowed; connect to these
};

class ssrf_guard {
 public:
  explicit ssrf_guard(std::vector<cidr> allow = {}) : allow_(std::move(allow)) {}

  // Whether the guard lets a connection go to this address.
  bool allowed(const ip_address& a) const;

  // Parse, resolve (blocking getaddrinfo) and check every address; nullopt with
  // *error if the URL is malformed, unresolvable, or any address is blocked.
  // resolve = false skips DNS for hostnames (syntax + literal checks only), for request validation.
  std::optional<checked_url> check(std::string_view url, std::string* error, bool resolve = true) const;

  const std::vector<cidr>& allow_list() const { return allow_; }

 private:
  std::vector<cidr> allow_;
};

// True for addresses in a private, loopback, link-local, CGNAT, multicast,
// unspecified, documentation, IPv4-mapped/translated or otherwise special range.
bool is_special_address(const ip_address& a);

}  // namespace agentq::net
