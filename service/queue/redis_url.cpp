// Parsing of redis:// URLs (see redis_url.h).
#include "queue/redis_url.h"

#include <charconv>

namespace agentq::queue {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoding; nullopt on a truncated or non-hex escape.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

template <class T>
bool parse_int(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::optional<redis_options> parse_redis_url(std::string_view url, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<redis_options> {
    if (error) *error = "invalid --redis URL (" + why + "); expected redis://[[user]:password@]host[:port][/db]";
    return std::nullopt;
  };
  redis_options o;
  std::string_view rest = url;
  if (rest.starts_with("rediss://"))
    return fail("rediss:// (TLS) is not supported by this build; reach Redis over a TLS tunnel or a private network");
  if (rest.starts_with("redis://"))
    rest.remove_prefix(8);
  else if (rest.find("://") != std::string_view::npos)
    return fail("unknown scheme");
  if (rest.find_first_of("?#") != std::string_view::npos) return fail("query strings are not supported");
  // NOTE: the userinfo ends at the last '@' before the path: a password may itself hold '@'.
  size_t slash = rest.find('/', rest.rfind('@') == std::string_view::npos ? 0 : rest.rfind('@'));
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) return fail("a user needs a password (user:password@)");
    auto user = percent_decode(userinfo.substr(0, colon));
    auto pass = percent_decode(userinfo.substr(colon + 1));
    if (!user || !pass) return fail("bad %-escape in the user or password");
    if (pass->empty()) return fail("empty password");
    o.username = *user;
    o.password = *pass;
  }
  std::string_view host = authority, port;
  if (authority.starts_with("[")) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return fail("unclosed [IPv6] host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return fail("junk after the [IPv6] host");
      port = after.substr(1);
      if (port.empty()) return fail("empty port");
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return fail("an IPv6 host needs brackets");
    if (port.empty()) return fail("empty port");
  }
  if (host.empty()) return fail("no host");
  for (char ch : host)
    if (static_cast<unsigned char>(ch) <= ' ' || ch == '@' || ch == '/') return fail("bad character in the host");
  o.host = std::string(host);
  if (!port.empty() && (!parse_int(port, &o.port) || o.port <= 0 || o.port > 65535)) return fail("bad port");
  if (!path.empty() && (!parse_int(path, &o.db) || o.db < 0)) return fail("the path must be a database number");
  return o;
}

std::string redact_redis_url(std::string_view url) {
  std::string s(url);
  size_t scheme = s.find("://");
  size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  size_t at = s.rfind('@');
  if (at == std::string::npos || at < start) return s;
  size_t colon = s.find(':', start);
  if (colon == std::string::npos || colon > at) return s;
  return s.substr(0, colon + 1) + "***" + s.substr(at);
}

}  // namespace agentq::queue
