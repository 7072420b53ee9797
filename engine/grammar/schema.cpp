// JSON Schema subset → schema tree, and validation against it. Supported:
// type (incl. unions), enum, const, properties, required, additionalProperties
// (bool or schema), items, minItems/maxItems, minLength/maxLength,
// minimum/maximum/exclusiveMinimum/exclusiveMaximum, anyOf, $defs/definitions
// with non-recursive $ref. Annotations (title, description, default, examples,
// format, $schema, $id, $comment) are ignored. Anything else is refused.
#include "grammar/schema.h"

#include <cmath>
#include <set>
#include <stdexcept>

namespace agentq::grammar {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string pointer_token(const std::string& s) {   // RFC 6901 escaping
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out.push_back(c);
  }
  return out;
}

const std::set<std::string, std::less<>> annotations = {"title", "description", "default", "examples", "format",
                                                         "$schema", "$id", "$comment", "deprecated", "readOnly",
                                                         "writeOnly"};
const std::set<std::string, std::less<>> supported = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "$defs",
    "definitions", "$ref"};

class builder {
 public:
  explicit builder(const json::value& root) : root_(root) {}

  schema build() {
    schema s;
    nodes_ = &s.nodes;
    build_node(root_, "");
    return s;
  }

 private:
  int64_t get_count(const json::value& v, const std::string& key, const std::string& path) {
    if (!v.is_integer() || v.as_number() < 0 || v.as_number() > 1e15)
      fail("'" + key + "' must be a non-negative integer at " + (path.empty() ? "/" : path));
    return static_cast<int64_t>(v.as_number());
  }
  double get_number(const json::value& v, const std::string& key, const std::string& path) {
    if (!v.is_number()) fail("'" + key + "' must be a number at " + (path.empty() ? "/" : path));
    return v.as_number();
  }

  const json::value& resolve_ref(const std::string& ref, const std::string& path) {
    std::string prefix;
    if (ref.starts_with("#/$defs/")) prefix = "#/$defs/";
    else if (ref.starts_with("#/definitions/")) prefix = "#/definitions/";
    else fail("unsupported $ref '" + ref + "' at " + path + " (only #/$defs/NAME and #/definitions/NAME)");
    std::string name = ref.substr(prefix.size());
    // undo RFC 6901 escaping
    std::string n;
    for (size_t i = 0; i < name.size(); i++) {
      if (name[i] == '~' && i + 1 < name.size() && (name[i + 1] == '0' || name[i + 1] == '1')) {
        n.push_back(name[i + 1] == '0' ? '~' : '/');
        i++;
      } else {
        n.push_back(name[i]);
      }
    }
    const json::value* defs = root_.is_object() ? root_.find(prefix == "#/$defs/" ? "$defs" : "definitions") : nullptr;
    const json::value* target = defs && defs->is_object() ? defs->find(n) : nullptr;
    if (!target) fail("unresolved $ref '" + ref + "' at " + path);
    return *target;
  }

  int32_t build_node(const json::value& v, const std::string& path) {
    if (++n_built_ > 10000) fail("schema too large (more than 10000 subschemas after $ref expansion)");
    if (ref_stack_.size() > 64) fail("schema nested too deeply at " + path);
    int32_t idx = static_cast<int32_t>(nodes_->size());
    nodes_->emplace_back();
    (*nodes_)[idx].path = path.empty() ? "/" : path;
    if (v.is_bool()) {
      if (!v.as_bool()) (*nodes_)[idx].never = true;
      return idx;
    }
    if (!v.is_object()) fail("a schema must be an object or a boolean at " + (path.empty() ? "/" : path));

    for (const auto& [k, _] : v.members()) {
      if (!supported.count(k) && !annotations.count(k))
        fail("unsupported JSON Schema keyword '" + k + "' at " + (path.empty() ? "/" : path));
    }
    if (const json::value* r = v.find("$ref")) {
      if (!r->is_string()) fail("'$ref' must be a string at " + path);
      for (const auto& [k, _] : v.members()) {
        if (k != "$ref" && k != "$defs" && k != "definitions" && !annotations.count(k))
          fail("'$ref' with sibling keyword '" + k + "' is not supported at " + (path.empty() ? "/" : path));
      }
      const std::string& ref = r->as_string();
      for (const auto& s : ref_stack_) if (s == ref) fail("recursive $ref '" + ref + "' is not supported at " + path);
      ref_stack_.push_back(ref);
      const json::value& target = resolve_ref(ref, path);
      // Build the target in place of this node: copy its result over idx.
      int32_t t = build_node(target, path);
      ref_stack_.pop_back();
      schema_node copy = (*nodes_)[t];
      (*nodes_)[idx] = std::move(copy);
      return idx;
    }

    schema_node n;
    n.path = path.empty() ? "/" : path;
    if (const json::value* t = v.find("type")) {
      n.types = 0;
      auto add = [&](const json::value& x) {
        if (!x.is_string()) fail("'type' entries must be strings at " + n.path);
        const std::string& s = x.as_string();
        if (s == "null") n.types |= uint8_t(json_type::null);
        else if (s == "boolean") n.types |= uint8_t(json_type::boolean);
        else if (s == "integer") n.types |= uint8_t(json_type::integer);
        else if (s == "number") n.types |= uint8_t(json_type::number) | uint8_t(json_type::integer);
        else if (s == "string") n.types |= uint8_t(json_type::string);
        else if (s == "array") n.types |= uint8_t(json_type::array);
        else if (s == "object") n.types |= uint8_t(json_type::object);
        else fail("unknown type '" + s + "' at " + n.path);
      };
      if (t->is_array()) {
        if (t->items().empty()) fail("'type' must not be empty at " + n.path);
        for (const auto& x : t->items()) add(x);
      } else {
        add(*t);
      }
    }
    if (const json::value* e = v.find("enum")) {
      if (!e->is_array() || e->items().empty()) fail("'enum' must be a non-empty array at " + n.path);
      n.has_enum = true;
      n.enum_values = e->items();
    }
    if (const json::value* c = v.find("const")) {
      if (n.has_enum) fail("'const' together with 'enum' is not supported at " + n.path);
      n.has_enum = true;
      n.enum_values = {*c};
    }
    if (const json::value* x = v.find("minLength")) n.min_length = get_count(*x, "minLength", n.path);
    if (const json::value* x = v.find("maxLength")) n.max_length = get_count(*x, "maxLength", n.path);
    if (const json::value* x = v.find("minimum")) n.minimum = get_number(*x, "minimum", n.path);
    if (const json::value* x = v.find("maximum")) n.maximum = get_number(*x, "maximum", n.path);
    if (const json::value* x = v.find("exclusiveMinimum")) n.exclusive_minimum = get_number(*x, "exclusiveMinimum", n.path);
    if (const json::value* x = v.find("exclusiveMaximum")) n.exclusive_maximum = get_number(*x, "exclusiveMaximum", n.path);
    if (const json::value* x = v.find("minItems")) n.min_items = get_count(*x, "minItems", n.path);
    if (const json::value* x = v.find("maxItems")) n.max_items = get_count(*x, "maxItems", n.path);
    if (n.max_length >= 0 && n.min_length > n.max_length) fail("minLength > maxLength at " + n.path);
    if (n.max_items >= 0 && n.min_items > n.max_items) fail("minItems > maxItems at " + n.path);
    (*nodes_)[idx] = n;   // store early: children append to nodes_

    if (const json::value* items = v.find("items")) {
      if (items->is_array()) fail("tuple-form 'items' (an array) is not supported at " + n.path);
      int32_t c = build_node(*items, path + "/items");
      (*nodes_)[idx].items = c;
    }
    if (const json::value* props = v.find("properties")) {
      if (!props->is_object()) fail("'properties' must be an object at " + n.path);
      for (const auto& [name, sub] : props->members()) {
        int32_t c = build_node(sub, path + "/properties/" + pointer_token(name));
        (*nodes_)[idx].properties.emplace_back(name, c);
      }
    }
    if (const json::value* req = v.find("required")) {
      if (!req->is_array()) fail("'required' must be an array at " + n.path);
      for (const auto& r : req->items()) {
        if (!r.is_string()) fail("'required' entries must be strings at " + n.path);
        (*nodes_)[idx].required.push_back(r.as_string());
      }
    }
    if (const json::value* ap = v.find("additionalProperties")) {
      if (ap->is_bool()) {
        (*nodes_)[idx].additional_allowed = ap->as_bool();
      } else {
        int32_t c = build_node(*ap, path + "/additionalProperties");
        (*nodes_)[idx].additional = c;
      }
    }
    if (const json::value* any = v.find("anyOf")) {
      if (!any->is_array() || any->items().empty()) fail("'anyOf' must be a non-empty array at " + n.path);
      for (const auto& [k, _] : v.members()) {
        if (k != "anyOf" && k != "$defs" && k != "definitions" && !annotations.count(k))
          fail("'anyOf' with sibling keyword '" + k + "' is not supported at " + n.path);
      }
      for (size_t i = 0; i < any->items().size(); i++) {
        int32_t c = build_node(any->items()[i], path + "/anyOf/" + std::to_string(i));
        (*nodes_)[idx].any_of.push_back(c);
      }
    }
    return idx;
  }

  const json::value& root_;
  std::vector<schema_node>* nodes_ = nullptr;
  std::vector<std::string> ref_stack_;
  size_t n_built_ = 0;
};

// ---------------------------------------------------------------------------
// validation

size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class validator {
 public:
  validator(const schema& s, std::vector<std::string>& errors) : s_(s), errors_(errors) {}

  // Returns true when valid; appends errors only when `report`.
  bool check(int32_t idx, const json::value& v, const std::string& at, bool report) {
    const schema_node& n = s_.nodes[idx];
    auto err = [&](const std::string& what) {
      if (report) errors_.push_back((at.empty() ? std::string("/") : at) + ": " + what);
      return false;
    };
    if (n.never) return err("no value is allowed here");
    if (!n.any_of.empty()) {
      for (int32_t c : n.any_of) if (check(c, v, at, false)) return true;
      return err("value matches none of the anyOf alternatives");
    }
    uint8_t t = 0;
    switch (v.type()) {
      case json::kind::null: t = uint8_t(json_type::null); break;
      case json::kind::boolean: t = uint8_t(json_type::boolean); break;
      case json::kind::number: t = v.is_integer() ? uint8_t(json_type::integer) : uint8_t(json_type::number); break;
      case json::kind::string: t = uint8_t(json_type::string); break;
      case json::kind::array: t = uint8_t(json_type::array); break;
      case json::kind::object: t = uint8_t(json_type::object); break;
    }
    if (!(n.types & t)) return err(std::string("expected ") + type_list(n.types) + ", got " + json::name_of(v.type()));
    if (n.has_enum) {
      bool found = false;
      for (const auto& e : n.enum_values) found = found || e == v;
      if (!found) return err(n.enum_values.size() == 1 ? "value must be " + n.enum_values[0].dump()
                                                        : "value is not one of the enum values");
    }
    bool ok = true;
    if (v.is_string()) {
      size_t len = count_code_points(v.as_string());
      if (static_cast<int64_t>(len) < n.min_length) ok = err("string shorter than minLength " + std::to_string(n.min_length));
      if (n.max_length >= 0 && static_cast<int64_t>(len) > n.max_length)
        ok = err("string longer than maxLength " + std::to_string(n.max_length));
    } else if (v.is_number()) {
      double x = v.as_number();
      if (n.minimum && x < *n.minimum) ok = err("number below minimum " + json::value::make_number(*n.minimum).dump());
      if (n.maximum && x > *n.maximum) ok = err("number above maximum " + json::value::make_number(*n.maximum).dump());
      if (n.exclusive_minimum && x <= *n.exclusive_minimum)
        ok = err("number not above exclusiveMinimum " + json::value::make_number(*n.exclusive_minimum).dump());
      if (n.exclusive_maximum && x >= *n.exclusive_maximum)
        ok = err("number not below exclusiveMaximum " + json::value::make_number(*n.exclusive_maximum).dump());
    } else if (v.is_array()) {
      int64_t len = static_cast<int64_t>(v.items().size());
      if (len < n.min_items) ok = err("array has fewer than minItems " + std::to_string(n.min_items));
      if (n.max_items >= 0 && len > n.max_items) ok = err("array has more than maxItems " + std::to_string(n.max_items));
      if (n.items >= 0) {
        for (size_t i = 0; i < v.items().size(); i++) {
          if (!check(n.items, v.items()[i], at + "/" + std::to_string(i), report)) {
            ok = false;
            if (!report) return false;
          }
        }
      }
    } else if (v.is_object()) {
      for (const auto& r : n.required) {
        if (!v.find(r)) ok = err("missing required property \"" + r + "\"");
      }
      for (const auto& [k, x] : v.members()) {
        int32_t sub = -2;
        for (const auto& [pk, pc] : n.properties) if (pk == k) sub = pc;
        if (sub == -2) {
          if (!n.additional_allowed) { ok = err("unexpected property \"" + k + "\""); continue; }
          sub = n.additional;
        }
        if (sub >= 0 && !check(sub, x, at + "/" + pointer_token(k), report)) {
          ok = false;
          if (!report) return false;
        }
      }
    }
    return ok;
  }

 private:
  static std::string type_list(uint8_t types) {
    static const char* names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    std::string s;
    for (int b = 0; b < 7; b++) {
      if (!(types & (1 << b))) continue;
      if (b == 2 && (types & 8)) continue;   // "number" covers integer
      if (!s.empty()) s += " or ";
      s += names[b];
    }
    return s;
  }

  const schema& s_;
  std::vector<std::string>& errors_;
};

}  // namespace

schema parse_schema_or_throw(const json::value& doc) {
  builder b(doc);
  return b.build();
}

std::shared_ptr<const schema> parse_schema(std::string_view text, std::string* error) {
  try {
    json::value doc = json::parse_or_throw(text);
    auto s = std::make_shared<schema>(parse_schema_or_throw(doc));
    s->text = std::string(text);
    return s;
  } catch (const json::parse_error& e) {
    if (error) *error = "schema is not valid JSON: offset " + std::to_string(e.offset) + ": " + e.what();
  } catch (const std::exception& e) {
    if (error) *error = e.what();
  }
  return nullptr;
}

std::vector<std::string> validate_at(const schema& s, int32_t node_idx, const json::value& v) {
  std::vector<std::string> errors;
  validator val(s, errors);
  if (!val.check(node_idx, v, "", true) && errors.empty()) errors.push_back("/: value does not match the schema");
  return errors;
}

std::vector<std::string> validate(const schema& s, const json::value& v) { return validate_at(s, 0, v); }

}  // namespace agentq::grammar
