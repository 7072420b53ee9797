// libFuzzer target: the engine JSON parser over arbitrary bytes must never
// crash; whatever it accepts must round-trip through dump() and dump_py().
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "json/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  agentq::json::parse_options opt;
  opt.max_depth = 64;
  std::string err;
  auto v = agentq::json::parse(text, &err, opt);
  if (!v) {
    if (err.find("offset") == std::string::npos) std::abort();
    return 0;
  }
  std::string compact = v->dump();
  auto back = agentq::json::parse(compact, &err, opt);
  if (!back || !(*back == *v) || back->dump() != compact) std::abort();
  auto py = agentq::json::parse(v->dump_py(2), &err, opt);
  if (!py || !(*py == *v)) std::abort();
  if (!agentq::json::valid_utf8(compact)) std::abort();
  return 0;
}
