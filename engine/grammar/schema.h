// JSON Schema subset: parse a schema into a small tree (refusing what we can't
// enforce, naming the keyword and its location) and validate JSON values
// against it. The grammar compiler (grammar/matcher.h) builds on the same tree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "json/json.h"

namespace agentq::grammar {

// Bits of schema_node::types.
enum class json_type : uint8_t { null = 1, boolean = 2, integer = 4, number = 8, string = 16, array = 32, object = 64 };
inline constexpr uint8_t all_types = 127;

struct schema_node {
  uint8_t types = all_types;           // allowed JSON types (number includes integer)
  bool never = false;                  // the `false` schema
  bool has_enum = false;               // enum or const
  std::vector<json::value> enum_values;
  // string
  int64_t min_length = 0, max_length = -1;     // code points; -1 = unbounded
  // number / integer
  std::optional<double> minimum, maximum, exclusive_minimum, exclusive_maximum;
  // array
  int32_t items = -1;                  // node index; -1 = any
  int64_t min_items = 0, max_items = -1;
  // object
  std::vector<std::pair<std::string, int32_t>> properties;   // declaration order
  std::vector<std::string> required;
  bool additional_allowed = true;
  int32_t additional = -1;             // schema for extra properties; -1 = any
  // combinators
  std::vector<int32_t> any_of;         // non-empty: value must match one of these (no sibling constraints)
  std::string path;                    // JSON pointer of this node in the source schema
};

struct schema {
  std::vector<schema_node> nodes;      // nodes[0] is the root
  std::string text;                    // source text
};

// Parse and check a schema. Throws std::runtime_error with a message such as
// "unsupported JSON Schema keyword 'patternProperties' at /properties/x".
schema parse_schema_or_throw(const json::value& doc);
// Facade: nullptr with *error on failure.
std::shared_ptr<const schema> parse_schema(std::string_view text, std::string* error);

// Validate v against s; each error names the JSON pointer of the offending value.
std::vector<std::string> validate(const schema& s, const json::value& v);
// The same against the subschema s.nodes[node_idx].
std::vector<std::string> validate_at(const schema& s, int32_t node_idx, const json::value& v);

}  // namespace agentq::grammar
