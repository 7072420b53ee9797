// Strict JSON parser and serializers (RFC 8259). The parser is a recursive
// descent over bytes with an explicit depth limit; it throws parse_error with
// the byte offset, and parse() turns that into a message.
#include "json/json.h"

#include "tokenizer/unicode.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace agentq::json {

const char* name_of(kind k) {
  switch (k) {
    case kind::null: return "null";
    case kind::boolean: return "boolean";
    case kind::number: return "number";
    case kind::string: return "string";
    case kind::array: return "array";
    case kind::object: return "object";
  }
  return "?";
}

value value::make_bool(bool b) { value v; v.kind_ = kind::boolean; v.bool_ = b; return v; }
value value::make_number(double d) {
  char buf[32];
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", d);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", d);
    for (int prec = 1; prec <= 17; prec++) {   // shortest text that round-trips
      char tmp[32];
      std::snprintf(tmp, sizeof tmp, "%.*g", prec, d);
      if (std::strtod(tmp, nullptr) == d) { std::memcpy(buf, tmp, sizeof tmp); break; }
    }
  }
  return make_number_text(d, buf);
}
value value::make_number_text(double d, std::string text) {
  value v; v.kind_ = kind::number; v.num_ = d; v.str_ = std::move(text); return v;
}
value value::make_string(std::string s) { value v; v.kind_ = kind::string; v.str_ = std::move(s); return v; }
value value::make_array(std::vector<value> items) { value v; v.kind_ = kind::array; v.items_ = std::move(items); return v; }
value value::make_object(std::vector<member> members) {
  value v; v.kind_ = kind::object; v.members_ = std::move(members); return v;
}

bool value::is_integer() const {
  return kind_ == kind::number && std::isfinite(num_) && num_ == std::floor(num_);
}

const value* value::find(std::string_view key) const {
  for (const auto& m : members_) if (m.first == key) return &m.second;
  return nullptr;
}

bool operator==(const value& a, const value& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case kind::null: return true;
    case kind::boolean: return a.bool_ == b.bool_;
    case kind::number: return a.num_ == b.num_;
    case kind::string: return a.str_ == b.str_;
    case kind::array: return a.items_ == b.items_;
    case kind::object: {
      if (a.members_.size() != b.members_.size()) return false;
      for (const auto& m : a.members_) {
        const value* o = b.find(m.first);
        if (!o || !(*o == m.second)) return false;
      }
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// Serialization

void append_quoted(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

static void dump_to(const value& v, std::string& out) {
  switch (v.type()) {
    case kind::null: out += "null"; break;
    case kind::boolean: out += v.as_bool() ? "true" : "false"; break;
    case kind::number: out += v.number_text(); break;
    case kind::string: append_quoted(out, v.as_string()); break;
    case kind::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& x : v.items()) {
        if (!first) out.push_back(',');
        first = false;
        dump_to(x, out);
      }
      out.push_back(']');
      break;
    }
    case kind::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, x] : v.members()) {
        if (!first) out.push_back(',');
        first = false;
        append_quoted(out, k);
        out.push_back(':');
        dump_to(x, out);
      }
      out.push_back('}');
      break;
    }
  }
}

std::string value::dump() const {
  std::string out;
  dump_to(*this, out);
  return out;
}

static void dump_py_to(const value& v, std::string& out, int indent, int level) {
  auto newline = [&](int lvl) {
    out.push_back('\n');
    out.append(static_cast<size_t>(indent) * lvl, ' ');
  };
  switch (v.type()) {
    case kind::array: {
      if (v.items().empty()) { out += "[]"; return; }
      out.push_back('[');
      bool first = true;
      for (const auto& x : v.items()) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        dump_py_to(x, out, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out.push_back(']');
      return;
    }
    case kind::object: {
      if (v.members().empty()) { out += "{}"; return; }
      out.push_back('{');
      bool first = true;
      for (const auto& [k, x] : v.members()) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        append_quoted(out, k);
        out += ": ";
        dump_py_to(x, out, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out.push_back('}');
      return;
    }
    default: dump_to(v, out);
  }
}

std::string value::dump_py(int indent) const {
  std::string out;
  dump_py_to(*this, out, indent, 0);
  return out;
}

// ---------------------------------------------------------------------------
// UTF-8

// Length of the valid UTF-8 sequence at s[i], or 0 if invalid.
static size_t utf8_seq_len(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; k++) if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_seq_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Parser

namespace {

class parser {
 public:
  parser(std::string_view s, const parse_options& opt) : s_(s), opt_(opt) {}

  value parse_document() {
    if (s_.size() > opt_.max_size) fail("input larger than " + std::to_string(opt_.max_size) + " bytes", 0);
    skip_ws();
    value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected trailing characters", pos_);
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at) { throw parse_error(what, at); }

  bool at_end() const { return pos_ >= s_.size(); }
  unsigned char peek() const { return static_cast<unsigned char>(s_[pos_]); }

  void skip_ws() {
    while (!at_end()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') pos_++;
      else break;
    }
  }

  void expect_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) fail("invalid literal (expected '" + std::string(lit) + "')", pos_);
    pos_ += lit.size();
  }

  value parse_value(size_t depth) {
    if (at_end()) fail("unexpected end of input (expected a value)", pos_);
    switch (peek()) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return value::make_string(parse_string());
      case 't': expect_literal("true"); return value::make_bool(true);
      case 'f': expect_literal("false"); return value::make_bool(false);
      case 'n': expect_literal("null"); return value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail(std::string("unexpected character '") + describe(peek()) + "' (expected a value)", pos_);
    }
  }

  static std::string describe(unsigned char c) {
    if (c >= 0x20 && c < 0x7f) return std::string(1, static_cast<char>(c));
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    return buf;
  }

  value parse_object(size_t depth) {
    if (depth > opt_.max_depth) fail("nesting deeper than " + std::to_string(opt_.max_depth), pos_);
    pos_++;  // {
    value obj = value::make_object();
    skip_ws();
    if (!at_end() && peek() == '}') { pos_++; return obj; }
    for (;;) {
      skip_ws();
      if (at_end() || peek() != '"') fail("expected a string key", pos_);
      size_t key_at = pos_;
      std::string key = parse_string();
      if (!opt_.allow_duplicate_keys && obj.find(key)) fail("duplicate key \"" + key + "\"", key_at);
      skip_ws();
      if (at_end() || peek() != ':') fail("expected ':' after key", pos_);
      pos_++;
      skip_ws();
      value v = parse_value(depth);
      obj.push_back(std::move(key), std::move(v));
      skip_ws();
      if (at_end()) fail("unexpected end of input in object", pos_);
      if (peek() == ',') { pos_++; continue; }
      if (peek() == '}') { pos_++; return obj; }
      fail("expected ',' or '}' in object", pos_);
    }
  }

  value parse_array(size_t depth) {
    if (depth > opt_.max_depth) fail("nesting deeper than " + std::to_string(opt_.max_depth), pos_);
    pos_++;  // [
    value arr = value::make_array();
    skip_ws();
    if (!at_end() && peek() == ']') { pos_++; return arr; }
    for (;;) {
      skip_ws();
      arr.push_back(parse_value(depth));
      skip_ws();
      if (at_end()) fail("unexpected end of input in array", pos_);
      if (peek() == ',') { pos_++; continue; }
      if (peek() == ']') { pos_++; return arr; }
      fail("expected ',' or ']' in array", pos_);
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape", pos_);
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
      char c = s_[pos_ + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("invalid hex digit in \\u escape", pos_ + k);
    }
    pos_ += 4;
    return v;
  }

  std::string parse_string() {
    size_t start = pos_;
    pos_++;  // "
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string", start);
      unsigned char c = peek();
      if (c == '"') { pos_++; return out; }
      if (c < 0x20) fail("control character in string (must be escaped)", pos_);
      if (c == '\\') {
        pos_++;
        if (at_end()) fail("unterminated escape", pos_);
        char e = s_[pos_++];
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            size_t at = pos_ - 2;
            uint32_t cp = parse_hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (s_.substr(pos_, 2) != "\\u") fail("unpaired high surrogate in \\u escape", at);
              pos_ += 2;
              uint32_t lo = parse_hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) fail("invalid low surrogate in \\u escape", at);
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              fail("unpaired low surrogate in \\u escape", at);
            }
            unicode::append_utf8(out, cp);
            break;
          }
          default: fail(std::string("invalid escape '\\") + describe(static_cast<unsigned char>(e)) + "'", pos_ - 2);
        }
        continue;
      }
      if (c < 0x80) { out.push_back(static_cast<char>(c)); pos_++; continue; }
      size_t n = utf8_seq_len(s_, pos_);
      if (!n) fail("invalid UTF-8 in string", pos_);
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  value parse_number() {
    size_t start = pos_;
    auto digit = [&] { return !at_end() && peek() >= '0' && peek() <= '9'; };
    if (peek() == '-') pos_++;
    if (!digit()) fail("invalid number (expected a digit)", pos_);
    if (peek() == '0') {
      pos_++;
      if (digit()) fail("invalid number (leading zero)", pos_);
    } else {
      while (digit()) pos_++;
    }
    if (!at_end() && peek() == '.') {
      pos_++;
      if (!digit()) fail("invalid number (expected a digit after '.')", pos_);
      while (digit()) pos_++;
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      pos_++;
      if (!at_end() && (peek() == '+' || peek() == '-')) pos_++;
      if (!digit()) fail("invalid number (expected an exponent digit)", pos_);
      while (digit()) pos_++;
    }
    std::string text(s_.substr(start, pos_ - start));
    double d = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(d)) fail("number out of range", start);
    return value::make_number_text(d, std::move(text));
  }

  std::string_view s_;
  const parse_options& opt_;
  size_t pos_ = 0;
};

}  // namespace

value parse_or_throw(std::string_view text, const parse_options& opt) {
  parser p(text, opt);
  return p.parse_document();
}

std::optional<value> parse(std::string_view text, std::string* error, const parse_options& opt) {
  try {
    return parse_or_throw(text, opt);
  } catch (const parse_error& e) {
    if (error) *error = "JSON parse error at offset " + std::to_string(e.offset) + ": " + e.what();
  }
  return std::nullopt;
}

}  // namespace agentq::json
