// The job request format (what POST /v1/jobs stores as request_json) and its parser.
// The API validates with parse_agent_spec at submit; the worker parses again at claim.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <agentq/engine.h>

namespace agentq::worker {

// {
//   "messages": [{"role":"system|user|assistant|tool","content":"..","tool_calls":[..],"tool_call_id":".."}],
//   "tools": [{"type":"function","function":{"name","description","parameters":{..}},
//              "execution":{"type":"http","url":"http://..","timeout_ms":10000,"max_retries":2}}],
//   "tool_choice": "auto"|"none"|"required"|{"type":"function","function":{"name":".."}},
//   "parallel_tool_calls": true,
//   "response_format": {"type":"json_schema","json_schema":{"schema":{..}}},
//   "temperature":0, "top_p":1, "top_k":0, "seed":0,
//   "max_turns":16, "max_output_tokens":4096, "max_tokens_per_turn":512, "deadline_seconds":600,
//   "priority":"high|normal|low", "stream_tokens": false, "stop": ["..."],
//   "json_whitespace": "spaced"|"free"
// }
// Tools without "execution" are client-side: the job goes to requires_action.
struct http_execution {
  std::string url;
  int32_t timeout_ms = 10000;
  int32_t max_retries = 2;
  int64_t max_response_bytes = 1 << 20;
};

struct tool_spec {
  tool_def def;
  std::optional<http_execution> http;  // nullopt = client-side tool
};

struct agent_spec {
  std::vector<chat_message> messages;
  std::vector<tool_spec> tools;
  tool_choice choice;
  bool parallel_tool_calls = true;
  json_whitespace json_ws = json_whitespace::spaced;  // in tool-call arguments and the schema answer
  std::string response_schema_json;
  sampling_params sampling;
  int32_t max_turns = 16;
  int64_t max_output_tokens = 4096;    // all turns together
  int32_t max_tokens_per_turn = 512;
  double deadline_seconds = 0;         // 0 = none
  std::string priority = "normal";
  bool stream_tokens = false;          // write "token" events
  std::vector<std::string> stop;       // stop strings for every turn
  std::string prediction;              // Predicted Outputs: lookup text for speculation, every turn
  // NOTE: tool_choice required/named applies to the first turn only, then reverts to auto,
  // so a forced tool call doesn't loop forever. "tool_choice_every_turn": true keeps it.
  bool tool_choice_every_turn = false;
  // "client_tool_calls": "finish" (set by the OpenAI surface, docs/openai.md): a turn that calls a
  // client tool completes the job with the calls in its transcript, instead of requires_action;
  // the client answers in a new request (previous_response_id / the next chat messages).
  bool finish_on_client_tools = false;
  // "keep_kv": true (set by the OpenAI surface for a stored response): when the job completes its
  // KV stays parked for --response-kv-ttl-s for a previous_response_id continuation, which names
  // the chain's first job in "kv_chain" so it runs under the same engine KV key (kv_retention.h).
  bool keep_kv = false;

  const tool_spec* find_tool(const std::string& name) const;
};

// nullopt with *error naming the bad field on invalid input.
std::optional<agent_spec> parse_agent_spec(const std::string& request_json, std::string* error);

// Conversions between transcript JSON and engine messages.
std::string role_name(role r);
std::optional<role> parse_role(const std::string& s);
std::string tool_calls_to_json(const std::vector<tool_call>& calls);
std::vector<tool_call> tool_calls_from_json(const std::string& json);

}  // namespace agentq::worker
