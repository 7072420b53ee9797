// The engine's hooks into the grammar (constrained decoding) and tool-call parsing
// modules. NOTE: interim version while grammar/constraint.cpp and chat/tool_parser.cpp
// are being written: schemas are refused with a clear message and turns have no tool
// parser (all output is content). Replaced by the real calls when those land.
#include "engine_impl.h"

namespace agentq {

std::unique_ptr<output_constraint> engine_impl::make_schema_constraint(std::string_view, std::string* error) const {
  *error = "JSON Schema constrained output is not available in this build yet";
  return nullptr;
}

std::unique_ptr<output_constraint> engine_impl::make_tool_constraint(const turn_request&, std::string* error) const {
  *error = "tool_choice required/named is not available in this build yet";
  return nullptr;
}

std::unique_ptr<output_parser> engine_impl::make_parser(const turn_request&) const { return nullptr; }

std::optional<std::string> engine_impl::check_schema(std::string_view schema_json) const {
  if (schema_json.empty()) return std::nullopt;
  return std::string("JSON Schema constrained output is not available in this build yet");
}

}  // namespace agentq
