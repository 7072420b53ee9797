// Job events over HTTP (see event_stream.h).
#include "api/event_stream.h"

#include <nlohmann/json.hpp>

#include "api/job_view.h"
#include "http/errors.h"

namespace agentq::api {

using json = nlohmann::json;

event_cursor parse_event_cursor(const http::request& req) {
  event_cursor c;
  std::string text = req.header("last-event-id");
  if (text.empty()) text = req.query_param("after").value_or("");
  if (text.empty()) return c;
  bool digits = text.size() <= 18;
  for (char ch : text) digits = digits && ch >= '0' && ch <= '9';
  if (!digits) {
    c.error =
        http::error_response(http::error_kind::invalid_request, "event id must be a non-negative integer", "after");
    return c;
  }
  c.after = std::stoll(text);
  return c;
}

bool wants_sse(const http::request& req) {
  return req.header("accept").find("text/event-stream") != std::string::npos;
}

http::response event_list_response(const std::vector<store::job_event>& events, size_t max_events) {
  json data = json::array();
  for (size_t i = 0; i < events.size() && i < max_events; ++i) data.push_back(event_object(events[i]));
  http::response res;
  res.body = json{{"object", "list"}, {"data", data}, {"has_more", events.size() > max_events}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  return res;
}

std::string sse_frame(const store::job_event& e) {
  json data = event_object(e);
  return "id: " + std::to_string(e.id) + "\nevent: " + e.type +
         "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

http::response sse_response(store::store* st, event_feed feed, int64_t after, std::chrono::milliseconds keepalive) {
  http::response res;
  res.content_type = "text/event-stream";
  res.stream = [st, feed = std::move(feed), after, keepalive](http::stream_sink& out) mutable {
    auto last_write = std::chrono::steady_clock::now();
    while (!out.closed()) {
      auto events = feed.read(after, 256);
      for (const auto& e : events) {
        if (!out.write(sse_frame(e))) return;
        after = e.id;
        last_write = std::chrono::steady_clock::now();
      }
      if (!events.empty()) continue;
      if (feed.ended && feed.ended()) {
        // ended: drain what landed since, then close the stream
        for (const auto& e : feed.read(after, 256))
          if (!out.write(sse_frame(e))) return;
        return;
      }
      st->wait_events(after, std::chrono::milliseconds(500));
      if (std::chrono::steady_clock::now() - last_write > keepalive) {
        if (!out.write(": keep-alive\n\n")) return;
        last_write = std::chrono::steady_clock::now();
      }
    }
  };
  return res;
}

}  // namespace agentq::api
