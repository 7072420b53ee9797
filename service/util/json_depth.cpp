// JSON nesting depth without parsing (see json_depth.h).
#include "util/json_depth.h"

namespace agentq::util {

int32_t json_depth(std::string_view text) {
  int32_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // skip the escaped character
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) max_depth = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace agentq::util
