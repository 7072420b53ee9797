// OpenAI-style JSON ⇄ chat types, for the CLI and tests (the service has its own
// JSON layer): messages [{"role","content","tool_calls","tool_call_id","name"}]
// and tools [{"type":"function","function":{"name","description","parameters"}}].
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"

namespace agentq::chat {

// nullopt with *error naming the offending element on failure.
std::optional<std::vector<chat_message>> messages_from_json(std::string_view text, std::string* error);
std::optional<std::vector<tool_def>> tools_from_json(std::string_view text, std::string* error);
std::string messages_to_json(const std::vector<chat_message>& messages);

}  // namespace agentq::chat
