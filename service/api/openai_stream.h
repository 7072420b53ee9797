// OpenAI streams from the durable job event log: Responses events (response.created ...
// response.completed, strictly increasing sequence_number) and chat.completion.chunk frames.
// Both builders are pure functions of the events fed so far, so a stream resumed with
// starting_after=N (replaying the log from the start) yields the same events and numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace agentq::api {

// What a builder reads besides the event: the job's transcript (the committed turn's text and
// calls) and the response / completion object as it stands (for snapshots and the final event).
struct stream_source {
  std::function<std::vector<store::transcript_row>()> transcript;
  std::function<nlohmann::json()> object;  // response_object / chat_completion_object of the job now
};

// Split s into pieces of at most n bytes, never inside a UTF-8 character (n = 0: one piece).
std::vector<std::string> utf8_chunks(const std::string& s, size_t n);

class response_stream_builder {
 public:
  // args_chunk: bytes per response.function_call_arguments.delta (0 = the whole arguments).
  response_stream_builder(std::string response_id, stream_source source, size_t args_chunk = 16);
  // The Responses events this job event produces (each with its sequence_number), in order.
  std::vector<nlohmann::json> feed(const store::job_event& e);
  bool done() const { return done_; }  // a terminal event was emitted

 private:
  nlohmann::json emit(const std::string& type, nlohmann::json fields);
  nlohmann::json snapshot(const std::string& status);
  void close_message(std::vector<nlohmann::json>& out, const std::string& final_text, const std::string& status);

  std::string id_;
  stream_source src_;
  size_t args_chunk_;
  int64_t seq_ = 0;
  int32_t n_items_ = 0;            // output_index of the next item
  bool created_ = false, in_progress_ = false, done_ = false;
  bool msg_open_ = false;          // a message item is streaming
  std::string msg_id_;
  int32_t msg_index_ = 0;
  std::string msg_text_;           // text streamed so far into the open message
  int32_t n_turns_ = 0;            // turns closed so far (message item ids)
};

class chat_stream_builder {
 public:
  chat_stream_builder(std::string completion_id, std::string model, int64_t created_s, bool include_usage,
                      stream_source source, size_t args_chunk = 16);
  // The data payloads ("data: <payload>") this event produces; the last one is "[DONE]".
  std::vector<std::string> feed(const store::job_event& e);
  bool done() const { return done_; }

 private:
  nlohmann::json chunk(nlohmann::json delta, nlohmann::json finish_reason = nullptr);
  void start(std::vector<std::string>& out);

  std::string id_, model_;
  int64_t created_s_;
  bool include_usage_;
  stream_source src_;
  size_t args_chunk_;
  bool started_ = false, done_ = false;
  std::string text_;               // content streamed in the current turn
  int32_t n_calls_ = 0;            // tool_calls[].index of the next call
};

// "event: TYPE\ndata: JSON\n\n" (Responses) and "data: PAYLOAD\n\n" (chat).
std::string responses_sse_frame(const nlohmann::json& event);
std::string chat_sse_frame(const std::string& payload);

}  // namespace agentq::api
