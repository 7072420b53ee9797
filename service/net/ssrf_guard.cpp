// SSRF guard: URL parsing, strict host forms, special ranges, resolution (see ssrf_guard.h).
#include "net/ssrf_guard.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace agentq::net {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Host label characters allowed in a DNS name (letters, digits, '-', '.').
bool is_hostname(std::string_view h) {
  if (h.empty() || h.size() > 253 || h.front() == '.' || h.front() == '-') return false;
  size_t label = 0;
  for (char c : h) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) return false;
    if (++label > 63) return false;
  }
  return true;
}

// A host that some resolver would read as an IPv4 number: its last label is all
// digits or a 0x-prefixed hex number ("2130706433", "0x7f.1", "0177.0.0.1", "127.1").
bool looks_numeric_v4(std::string_view h) {
  if (!h.empty() && h.back() == '.') h.remove_suffix(1);
  size_t dot = h.rfind('.');
  std::string_view last = dot == std::string_view::npos ? h : h.substr(dot + 1);
  if (last.empty()) return false;
  if (std::all_of(last.begin(), last.end(), is_digit)) return true;
  if (last.size() > 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X'))
    return std::all_of(last.begin() + 2, last.end(), is_hex);
  return false;
}

std::vector<cidr> make_special_ranges() {
  static const char* k_ranges[] = {
      // IPv4
      "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
      "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
      "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
      // IPv6
      "::/128", "::1/128", "::ffff:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
      "2001::/23", "2001:db8::/32", "2002::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"};
  std::vector<cidr> out;
  for (const char* r : k_ranges) out.push_back(*cidr::parse(r));
  return out;
}

// NOTE: cloud metadata endpoints stay blocked even when an allow-list covers them.
bool is_metadata(const ip_address& a) {
  static const ip_address v4 = *ip_address::parse("169.254.169.254");
  static const ip_address v6 = *ip_address::parse("fd00:ec2::254");
  return (a.is_v6 == v4.is_v6 && a.bytes == v4.bytes) || (a.is_v6 == v6.is_v6 && a.bytes == v6.bytes);
}

}  // namespace

std::optional<ip_address> ip_address::parse(std::string_view text) {
  std::string s(text);
  ip_address a;
  if (s.find(':') != std::string::npos) {
    in6_addr v6{};
    if (inet_pton(AF_INET6, s.c_str(), &v6) != 1) return std::nullopt;
    a.is_v6 = true;
    std::memcpy(a.bytes.data(), &v6, 16);
    return a;
  }
  // strict dotted quad: 4 decimal parts 0..255, no leading zeros
  int n_parts = 0;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find('.', i);
    if (j == std::string::npos) j = s.size();
    std::string_view part(s.data() + i, j - i);
    if (part.empty() || part.size() > 3 || !std::all_of(part.begin(), part.end(), is_digit)) return std::nullopt;
    if (part.size() > 1 && part[0] == '0') return std::nullopt;
    int v = 0;
    std::from_chars(part.data(), part.data() + part.size(), v);
    if (v > 255 || n_parts >= 4) return std::nullopt;
    a.bytes[n_parts++] = uint8_t(v);
    i = j + 1;
  }
  if (n_parts != 4) return std::nullopt;
  return a;
}

std::string ip_address::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(is_v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

std::optional<cidr> cidr::parse(std::string_view text) {
  size_t slash = text.find('/');
  auto base = ip_address::parse(text.substr(0, slash));
  if (!base) return std::nullopt;
  int32_t max_len = base->is_v6 ? 128 : 32;
  int32_t len = max_len;
  if (slash != std::string_view::npos) {
    std::string_view n = text.substr(slash + 1);
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), len);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size() || len < 0 || len > max_len) return std::nullopt;
  }
  return cidr{*base, len};
}

bool cidr::contains(const ip_address& a) const {
  if (a.is_v6 != base.is_v6) return false;
  int32_t full = prefix_len / 8, rest = prefix_len % 8;
  for (int32_t i = 0; i < full; ++i)
    if (a.bytes[i] != base.bytes[i]) return false;
  if (rest == 0) return true;
  uint8_t mask = uint8_t(0xff << (8 - rest));
  return (a.bytes[full] & mask) == (base.bytes[full] & mask);
}

std::optional<std::vector<cidr>> parse_cidr_list(std::string_view text, std::string* error) {
  std::vector<cidr> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    auto c = cidr::parse(item);
    if (!c) {
      if (error) *error = "invalid CIDR '" + std::string(item) + "'";
      return std::nullopt;
    }
    out.push_back(*c);
  }
  return out;
}

bool is_special_address(const ip_address& a) {
  static const std::vector<cidr> ranges = make_special_ranges();
  if (!a.is_v6 && a.bytes[0] == 255 && a.bytes[1] == 255 && a.bytes[2] == 255 && a.bytes[3] == 255) return true;
  for (const cidr& c : ranges)
    if (c.contains(a)) return true;
  return false;
}

bool ssrf_guard::allowed(const ip_address& a) const {
  if (is_metadata(a)) return false;
  for (const cidr& c : allow_)
    if (c.contains(a)) return true;
  return !is_special_address(a);
}

std::optional<parsed_url> parse_url(std::string_view url, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<parsed_url> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  if (url.size() > 2048) return fail("URL is longer than 2048 characters");
  for (char c : url)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f || c == '\\')
      return fail("URL contains whitespace, control, backslash or non-ASCII characters");
  size_t colon = url.find("://");
  if (colon == std::string_view::npos) return fail("URL must start with http:// or https://");
  parsed_url u;
  u.scheme = lower(url.substr(0, colon));
  if (u.scheme != "http" && u.scheme != "https") return fail("URL scheme '" + u.scheme + "' is not http or https");
  std::string_view rest = url.substr(colon + 3);
  size_t path_at = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_at);
  std::string_view target = path_at == std::string_view::npos ? std::string_view{} : rest.substr(path_at);
  if (size_t hash = target.find('#'); hash != std::string_view::npos) target = target.substr(0, hash);
  u.target = target.empty() ? "/" : (target.front() == '?' ? "/" + std::string(target) : std::string(target));
  if (authority.find('@') != std::string_view::npos) return fail("URL must not contain user information ('@')");
  if (authority.empty()) return fail("URL has no host");

  std::string_view host, port;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return fail("URL has an unterminated IPv6 literal");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return fail("URL has junk after the IPv6 literal");
      port = after.substr(1);
    }
    if (host.find('%') != std::string_view::npos) return fail("IPv6 zone identifiers are not allowed");
    if (!ip_address::parse(host) || !ip_address::parse(host)->is_v6) return fail("URL has an invalid IPv6 literal");
    u.host_is_literal = true;
  } else {
    size_t c = authority.rfind(':');
    host = authority.substr(0, c);
    if (c != std::string_view::npos) port = authority.substr(c + 1);
  }
  u.host = lower(host);
  if (!u.host.empty() && u.host.back() == '.') u.host.pop_back();
  if (u.host.empty()) return fail("URL has no host");

  if (!u.host_is_literal) {
    if (!is_hostname(u.host)) return fail("URL host '" + u.host + "' is not a valid host name");
    if (looks_numeric_v4(u.host)) {
      if (!ip_address::parse(u.host))
        return fail("URL host '" + u.host + "' is a non-canonical IPv4 form (decimal, hex, octal or short)");
      u.host_is_literal = true;
    }
  }

  if (port.empty() && authority.back() == ':') return fail("URL has an empty port");
  if (port.empty()) {
    u.port = u.tls() ? 443 : 80;
  } else {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535)
      return fail("URL port '" + std::string(port) + "' is invalid");
    u.port = uint16_t(v);
  }
  return u;
}

std::optional<checked_url> ssrf_guard::check(std::string_view url, std::string* error, bool resolve) const {
  auto fail = [&](std::string msg) -> std::optional<checked_url> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  auto u = parse_url(url, error);
  if (!u) return std::nullopt;
  checked_url out{*u, {}};
  if (u->host_is_literal) {
    out.addresses.push_back(*ip_address::parse(u->host));
  } else {
    if (u->host == "localhost" || u->host.ends_with(".localhost")) {
      // resolves to loopback everywhere; check as such without DNS
      out.addresses.push_back(*ip_address::parse("127.0.0.1"));
    } else if (!resolve) {
      return out;
    } else {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int rc = getaddrinfo(u->host.c_str(), nullptr, &hints, &res);
      if (rc != 0) return fail("cannot resolve host '" + u->host + "': " + gai_strerror(rc));
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        ip_address a;
        if (ai->ai_family == AF_INET) {
          std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, 4);
        } else if (ai->ai_family == AF_INET6) {
          a.is_v6 = true;
          std::memcpy(a.bytes.data(), &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, 16);
        } else {
          continue;
        }
        if (std::find_if(out.addresses.begin(), out.addresses.end(), [&](const ip_address& b) {
              return b.is_v6 == a.is_v6 && b.bytes == a.bytes;
            }) == out.addresses.end())
          out.addresses.push_back(a);
      }
      freeaddrinfo(res);
      if (out.addresses.empty()) return fail("host '" + u->host + "' has no addresses");
    }
  }
  for (const ip_address& a : out.addresses)
    if (!allowed(a))
      return fail("URL host '" + u->host + "' resolves to " + a.to_string() +
                  ", a private or special-purpose address that is not allowed");
  return out;
}

}  // namespace agentq::net
