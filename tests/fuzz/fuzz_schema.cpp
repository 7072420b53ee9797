// libFuzzer target: input = schema text, "\n--\n", candidate text. Compiling
// any schema must fail cleanly or succeed; whatever the compiled matcher
// accepts as complete must parse as JSON and validate against the schema
// (the grammar may be narrower than the schema, never wider).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar/schema.h"
#include "json/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t sep = in.find("\n--\n");
  std::string_view schema_text = in.substr(0, sep);
  std::string_view value_text = sep == std::string_view::npos ? std::string_view() : in.substr(sep + 4);
  using namespace agentq;
  grammar::compile_result r = grammar::compile_schema(schema_text);
  if (!r.value) {
    if (r.error.empty()) std::abort();
    return 0;
  }
  grammar::matcher m(*r.value);
  grammar::match_state s = m.initial();
  if (!m.advance_bytes(s, value_text) || !m.can_finish(s)) return 0;
  std::string err;
  json::parse_options opt;
  opt.allow_duplicate_keys = true;   // free-form objects don't track keys (documented)
  opt.max_depth = 256;
  auto v = json::parse(value_text, &err, opt);
  if (!v) std::abort();
  auto schema = grammar::parse_schema(schema_text, &err);
  if (!schema) std::abort();
  if (!grammar::validate(*schema, *v).empty()) std::abort();
  return 0;
}
