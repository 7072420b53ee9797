// Strict RFC 8259 JSON for the engine: a value type, a parser and serializers.
// The engine links no JSON library; tool arguments, schemas and chat templates
// use this. Objects keep insertion order; numbers keep their source text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentq::json {

enum class kind : uint8_t { null, boolean, number, string, array, object };
const char* name_of(kind k);

class value;
using member = std::pair<std::string, value>;

class value {
 public:
  value() = default;                                  // null
  static value make_bool(bool b);
  static value make_number(double d);                 // text: shortest round-trip form
  static value make_number_text(double d, std::string text);
  static value make_string(std::string s);
  static value make_array(std::vector<value> items = {});
  static value make_object(std::vector<member> members = {});

  kind type() const { return kind_; }
  bool is_null() const { return kind_ == kind::null; }
  bool is_bool() const { return kind_ == kind::boolean; }
  bool is_number() const { return kind_ == kind::number; }
  bool is_string() const { return kind_ == kind::string; }
  bool is_array() const { return kind_ == kind::array; }
  bool is_object() const { return kind_ == kind::object; }
  // true for numbers with an integral value (1, 1.0, 1e2)
  bool is_integer() const;

  bool as_bool() const { return bool_; }
  double as_number() const { return num_; }
  const std::string& number_text() const { return str_; }   // numbers: the source text
  const std::string& as_string() const { return str_; }
  const std::vector<value>& items() const { return items_; }
  std::vector<value>& items() { return items_; }
  const std::vector<member>& members() const { return members_; }
  std::vector<member>& members() { return members_; }

  // objects: first member with this key, or nullptr
  const value* find(std::string_view key) const;
  // objects: append (no duplicate check)
  void push_back(std::string key, value v) { members_.emplace_back(std::move(key), std::move(v)); }
  void push_back(value v) { items_.push_back(std::move(v)); }

  // Compact canonical form: no whitespace, numbers as their source text,
  // strings with the minimal escapes (", \, control characters; \u00xx lowercase).
  std::string dump() const;
  // Python json.dumps(ensure_ascii=False) form, as Jinja's `tojson` in HF
  // templates prints: ", " and ": " separators; indent >= 0 pretty-prints with
  // that many spaces (separators "," and ": ").
  std::string dump_py(int indent = -1) const;

  // Deep equality; numbers compare by value, objects by member order-insensitive lookup.
  friend bool operator==(const value& a, const value& b);

 private:
  kind kind_ = kind::null;
  bool bool_ = false;
  double num_ = 0;
  std::string str_;
  std::vector<value> items_;
  std::vector<member> members_;
};

struct parse_options {
  size_t max_depth = 128;            // nesting of arrays/objects
  size_t max_size = 64u << 20;       // bytes of input
  bool allow_duplicate_keys = false; // RFC says SHOULD be unique; we refuse by default
};

// Thrown inside the parser; the facade below turns it into a message.
struct parse_error : std::runtime_error {
  size_t offset;  // byte offset of the problem in the input
  parse_error(const std::string& what, size_t off) : std::runtime_error(what), offset(off) {}
};

// Parse exactly one JSON text (surrounding whitespace allowed). Throws parse_error.
value parse_or_throw(std::string_view text, const parse_options& opt = {});
// Facade: nullopt with *error = "JSON parse error at offset N: ..." on failure.
std::optional<value> parse(std::string_view text, std::string* error = nullptr,
                           const parse_options& opt = {});

// Append s as a JSON string literal (with quotes) to out.
void append_quoted(std::string& out, std::string_view s);
// True when s is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace agentq::json
