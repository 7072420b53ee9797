// Job events -> OpenAI stream events (see openai_stream.h).
#include "api/openai_stream.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {

json parse_or(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

bool is_terminal_name(const std::string& s) {
  return s == "completed" || s == "failed" || s == "cancelled" || s == "incomplete";
}

const store::transcript_row* find_turn(const std::vector<store::transcript_row>& rows, int32_t turn) {
  for (const auto& r : rows)
    if (r.role == "assistant" && r.turn_idx == turn) return &r;
  return nullptr;
}

std::string fc_id(const std::string& call_id) {
  return "fc_" + (call_id.starts_with("call_") ? call_id.substr(5) : call_id);
}

}  // namespace

std::vector<std::string> utf8_chunks(const std::string& s, size_t n) {
  std::vector<std::string> out;
  if (n == 0 || s.size() <= n) {
    out.push_back(s);
    return out;
  }
  size_t at = 0;
  while (at < s.size()) {
    size_t end = std::min(s.size(), at + n);
    while (end < s.size() && end > at + 1 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
    // a single character longer than n: take it whole
    while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
    out.push_back(s.substr(at, end - at));
    at = end;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Responses

response_stream_builder::response_stream_builder(std::string response_id, stream_source source, size_t args_chunk)
    : id_(std::move(response_id)), src_(std::move(source)), args_chunk_(args_chunk) {}

json response_stream_builder::emit(const std::string& type, json fields) {
  json e = {{"type", type}, {"sequence_number", seq_++}};
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
  return e;
}

json response_stream_builder::snapshot(const std::string& status) {
  json o = src_.object();
  o["status"] = status;
  o["output"] = json::array();
  o["output_text"] = "";
  o["usage"] = nullptr;
  o["error"] = nullptr;
  o["incomplete_details"] = nullptr;
  o.erase("completed_at");
  return o;
}

void response_stream_builder::close_message(std::vector<json>& out, const std::string& final_text,
                                            const std::string& status) {
  if (final_text.size() > msg_text_.size() && final_text.starts_with(msg_text_))
    out.push_back(emit("response.output_text.delta", {{"item_id", msg_id_},
                                                      {"output_index", msg_index_},
                                                      {"content_index", 0},
                                                      {"delta", final_text.substr(msg_text_.size())},
                                                      {"logprobs", json::array()}}));
  json part = {{"type", "output_text"}, {"text", final_text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  out.push_back(emit("response.output_text.done", {{"item_id", msg_id_},
                                                   {"output_index", msg_index_},
                                                   {"content_index", 0},
                                                   {"text", final_text},
                                                   {"logprobs", json::array()}}));
  out.push_back(emit("response.content_part.done",
                     {{"item_id", msg_id_}, {"output_index", msg_index_}, {"content_index", 0}, {"part", part}}));
  out.push_back(emit("response.output_item.done", {{"output_index", msg_index_},
                                                   {"item", {{"type", "message"},
                                                             {"id", msg_id_},
                                                             {"status", status},
                                                             {"role", "assistant"},
                                                             {"content", json::array({part})}}}}));
  msg_open_ = false;
  msg_text_.clear();
}

std::vector<json> response_stream_builder::feed(const store::job_event& e) {
  std::vector<json> out;
  if (done_) return out;
  json d = parse_or(e.data_json, json::object());
  if (!d.is_object()) d = json::object();
  auto open_message = [&] {
    msg_open_ = true;
    msg_id_ = "msg_" + id_.substr(5) + "_" + std::to_string(n_turns_);
    msg_index_ = n_items_++;
    msg_text_.clear();
    out.push_back(emit("response.output_item.added",
                       {{"output_index", msg_index_},
                        {"item", {{"type", "message"}, {"id", msg_id_}, {"status", "in_progress"}, {"role", "assistant"},
                                  {"content", json::array()}}}}));
    out.push_back(emit("response.content_part.added",
                       {{"item_id", msg_id_},
                        {"output_index", msg_index_},
                        {"content_index", 0},
                        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}}));
  };
  if (!created_) {
    created_ = true;
    out.push_back(emit("response.created", {{"response", snapshot("queued")}}));
  }
  if (e.type == "status") {
    std::string st = d.value("status", "");
    if (st == "running" && !in_progress_) {
      in_progress_ = true;
      out.push_back(emit("response.in_progress", {{"response", snapshot("in_progress")}}));
    } else if (is_terminal_name(st)) {
      if (msg_open_) close_message(out, msg_text_, "incomplete");
      json final_obj = src_.object();
      out.push_back(emit("response." + st, {{"response", final_obj}}));
      done_ = true;
    }
  } else if (e.type == "token") {
    std::string piece = d.value("text", "");
    if (piece.empty()) return out;
    if (!msg_open_) open_message();
    msg_text_ += piece;
    out.push_back(emit("response.output_text.delta", {{"item_id", msg_id_},
                                                      {"output_index", msg_index_},
                                                      {"content_index", 0},
                                                      {"delta", piece},
                                                      {"logprobs", json::array()}}));
  } else if (e.type == "turn") {
    int32_t turn = d.value("turn", n_turns_);
    auto rows = src_.transcript();
    const auto* row = find_turn(rows, turn);
    std::string content = row ? row->content : msg_text_;
    json calls = row ? parse_or(row->tool_calls_json, json::array()) : d.value("tool_calls", json::array());
    if (!calls.is_array()) calls = json::array();
    // as response_output: a final turn always has its message item, even an empty one
    if (!msg_open_ && (!content.empty() || calls.empty())) open_message();
    if (msg_open_) close_message(out, content, "completed");
    for (const auto& c : calls) {
      std::string call_id = c.value("id", ""), name = c.value("name", ""), args = c.value("arguments", "{}");
      std::string item_id = fc_id(call_id);
      int32_t idx = n_items_++;
      json item = {{"type", "function_call"}, {"id", item_id}, {"call_id", call_id}, {"name", name},
                   {"arguments", ""}, {"status", "in_progress"}};
      out.push_back(emit("response.output_item.added", {{"output_index", idx}, {"item", item}}));
      for (const auto& piece : utf8_chunks(args, args_chunk_))
        out.push_back(emit("response.function_call_arguments.delta",
                           {{"item_id", item_id}, {"output_index", idx}, {"delta", piece}}));
      out.push_back(emit("response.function_call_arguments.done",
                         {{"item_id", item_id}, {"output_index", idx}, {"name", name}, {"arguments", args}}));
      item["arguments"] = args;
      item["status"] = "completed";
      out.push_back(emit("response.output_item.done", {{"output_index", idx}, {"item", item}}));
    }
    n_turns_ = turn + 1;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Chat Completions

chat_stream_builder::chat_stream_builder(std::string completion_id, std::string model, int64_t created_s,
                                         bool include_usage, stream_source source, size_t args_chunk)
    : id_(std::move(completion_id)),
      model_(std::move(model)),
      created_s_(created_s),
      include_usage_(include_usage),
      src_(std::move(source)),
      args_chunk_(args_chunk) {}

json chat_stream_builder::chunk(json delta, json finish_reason) {
  json c = {{"id", id_},
            {"object", "chat.completion.chunk"},
            {"created", created_s_},
            {"model", model_},
            {"system_fingerprint", "agentq"},
            {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                                      {"finish_reason", std::move(finish_reason)}}})}};
  if (include_usage_) c["usage"] = nullptr;
  return c;
}

void chat_stream_builder::start(std::vector<std::string>& out) {
  if (started_) return;
  started_ = true;
  out.push_back(chunk({{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}).dump());
}

std::vector<std::string> chat_stream_builder::feed(const store::job_event& e) {
  std::vector<std::string> out;
  if (done_) return out;
  json d = parse_or(e.data_json, json::object());
  if (!d.is_object()) d = json::object();
  if (e.type == "token") {
    std::string piece = d.value("text", "");
    if (piece.empty()) return out;
    start(out);
    text_ += piece;
    out.push_back(chunk({{"content", piece}}).dump());
  } else if (e.type == "turn") {
    start(out);
    auto rows = src_.transcript();
    const auto* row = find_turn(rows, d.value("turn", 0));
    std::string content = row ? row->content : text_;
    if (content.size() > text_.size() && content.starts_with(text_))
      out.push_back(chunk({{"content", content.substr(text_.size())}}).dump());
    text_.clear();
    json calls = row ? parse_or(row->tool_calls_json, json::array()) : d.value("tool_calls", json::array());
    if (!calls.is_array()) calls = json::array();
    for (const auto& c : calls) {
      int32_t idx = n_calls_++;
      out.push_back(chunk({{"tool_calls", json::array({{{"index", idx},
                                                        {"id", c.value("id", "")},
                                                        {"type", "function"},
                                                        {"function", {{"name", c.value("name", "")}, {"arguments", ""}}}}})}})
                        .dump());
      for (const auto& piece : utf8_chunks(c.value("arguments", "{}"), args_chunk_))
        out.push_back(chunk({{"tool_calls", json::array({{{"index", idx}, {"function", {{"arguments", piece}}}}})}}).dump());
    }
  } else if (e.type == "status") {
    std::string st = d.value("status", "");
    if (!is_terminal_name(st)) return out;
    done_ = true;
    json obj = src_.object();
    if (st == "failed" || st == "cancelled") {
      std::string why = st == "cancelled" ? "the completion was cancelled" : "the completion failed";
      out.push_back(json{{"error", {{"message", why}, {"type", "server_error"}, {"param", nullptr}, {"code", st}}}}.dump());
      return out;
    }
    start(out);
    json fr = obj["choices"][0].value("finish_reason", "stop");
    out.push_back(chunk(json::object(), fr).dump());
    if (include_usage_) {
      json u = chunk(json::object());
      u["choices"] = json::array();
      u["usage"] = obj["usage"];
      out.push_back(u.dump());
    }
    out.push_back("[DONE]");
  }
  return out;
}

std::string responses_sse_frame(const json& event) {
  return "event: " + event.value("type", "message") + "\ndata: " +
         event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string chat_sse_frame(const std::string& payload) { return "data: " + payload + "\n\n"; }

}  // namespace agentq::api
