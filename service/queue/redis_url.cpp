// Parsing of redis:// and sentinel:// URLs (see redis_url.h).
#include "queue/redis_url.h"

#include <cctype>
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

// host[:port] or [IPv6][:port]; false with *why.
bool parse_host_port(std::string_view authority, std::string* host_out, int32_t* port_out, std::string* why) {
  std::string_view host = authority, port;
  if (authority.starts_with("[")) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return *why = "unclosed [IPv6] host", false;
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return *why = "junk after the [IPv6] host", false;
      port = after.substr(1);
      if (port.empty()) return *why = "empty port", false;
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return *why = "an IPv6 host needs brackets", false;
    if (port.empty()) return *why = "empty port", false;
  }
  if (host.empty()) return *why = "no host", false;
  for (char ch : host)
    if (static_cast<unsigned char>(ch) <= ' ' || ch == '@' || ch == '/' || ch == ',')
      return *why = "bad character in the host", false;
  *host_out = std::string(host);
  if (!port.empty() && (!parse_int(port, port_out) || *port_out <= 0 || *port_out > 65535))
    return *why = "bad port", false;
  return true;
}

}  // namespace

std::optional<redis_options> parse_redis_url(std::string_view url, std::string* error) {
  const bool sentinel = url.starts_with("sentinel://");
  auto fail = [&](std::string why) -> std::optional<redis_options> {
    if (error)
      *error = "invalid --redis URL (" + why + "); expected " +
               (sentinel ? "sentinel://[[user]:password@]host[:port][,host[:port]...]/master_name[/db]"
                         : "redis://[[user]:password@]host[:port][/db]");
    return std::nullopt;
  };
  redis_options o;
  std::string_view rest = url;
  if (rest.starts_with("rediss://"))
    return fail("rediss:// (TLS) is not supported by this build; reach Redis over a TLS tunnel or a private network");
  if (rest.starts_with("redis://"))
    rest.remove_prefix(8);
  else if (sentinel)
    rest.remove_prefix(11);
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
  std::string why;
  if (!sentinel) {
    if (!parse_host_port(authority, &o.host, &o.port, &why)) return fail(why);
    if (!path.empty() && (!parse_int(path, &o.db) || o.db < 0)) return fail("the path must be a database number");
    return o;
  }
  // sentinel://: a comma-separated list of sentinels (default port 26379), then /master_name[/db].
  if (authority.empty()) return fail("no sentinel");
  while (true) {
    size_t comma = authority.find(',');
    std::string host;
    int32_t port = 26379;
    if (!parse_host_port(authority.substr(0, comma), &host, &port, &why)) return fail(why);
    if (o.sentinels.size() >= 16) return fail("more than 16 sentinels");
    o.sentinels.emplace_back(std::move(host), port);
    if (comma == std::string_view::npos) break;
    authority.remove_prefix(comma + 1);
  }
  std::string_view name = path.substr(0, path.find('/'));
  if (name.empty()) return fail("no master name");
  if (name.size() > 128) return fail("master name longer than 128 characters");
  for (char ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      return fail("bad character in the master name (A-Z a-z 0-9 . _ -)");
  o.master_name = std::string(name);
  if (size_t s2 = path.find('/'); s2 != std::string_view::npos) {
    std::string_view db = path.substr(s2 + 1);
    if (!parse_int(db, &o.db) || o.db < 0) return fail("the path after the master name must be a database number");
  }
  // NOTE: host/port start at the first sentinel's host, replaced by the master's address at each connect.
  o.host = o.sentinels.front().first;
  o.port = o.sentinels.front().second;
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
