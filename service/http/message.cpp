// Request helpers: header lookup, query parsing, percent decoding.
#include "http/message.h"

namespace agentq::http {

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string request::header(std::string_view name) const {
  return std::string(header_view(name));
}

std::string_view request::header_view(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

std::vector<std::pair<std::string, std::string>> request::query_params() const {
  std::vector<std::pair<std::string, std::string>> out;
  std::string_view q = query;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    out.emplace_back(percent_decode(kv.substr(0, eq)),
                     eq == std::string_view::npos ? std::string() : percent_decode(kv.substr(eq + 1)));
  }
  return out;
}

std::optional<std::string> request::query_param(std::string_view name) const {
  for (auto& [k, v] : query_params())
    if (k == name) return v;
  return std::nullopt;
}

std::string request::path_param(std::string_view name) const {
  for (const auto& [k, v] : path_params)
    if (k == name) return v;
  return "";
}

}  // namespace agentq::http
