// Nesting depth of JSON text, measured before parsing. nlohmann::json parses deep input
// iteratively but dump(), copies and comparisons recurse: a 200 KB body of '[' overflows
// the stack (found by fuzzing; tests/unit/service/json_depth.cpp). Untrusted JSON that will
// be dumped is refused when deeper than k_max_json_depth.
#pragma once

#include <cstdint>
#include <string_view>

namespace agentq::util {

constexpr int32_t k_max_json_depth = 128;  // objects/arrays inside each other; real requests use < 20

// Deepest nesting of '[' / '{' outside strings (escapes honoured). Malformed text is
// measured as far as it goes; the parser reports what else is wrong.
int32_t json_depth(std::string_view text);

}  // namespace agentq::util
