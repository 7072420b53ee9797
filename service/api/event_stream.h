// Job events over HTTP: the resume cursor (Last-Event-ID or ?after=), the SSE frame, and the
// streaming loop shared by GET /v1/jobs/{id}/events (one job) and GET /v1/events (a tenant).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "http/message.h"
#include "store/store.h"

namespace agentq::api {

// The cursor a client resumes from: Last-Event-ID, else ?after=.
struct event_cursor {
  std::optional<int64_t> after;         // nullopt when the client sent neither
  std::optional<http::response> error;  // set (400) when the value is not a non-negative integer
};
event_cursor parse_event_cursor(const http::request& req);

// true when the client asked for text/event-stream (else the route answers a JSON list).
bool wants_sse(const http::request& req);

// 200 {"object":"list","data":[event_object...],"has_more"}: read up to max_events + 1 events,
// show max_events (the JSON form of both event routes).
http::response event_list_response(const std::vector<store::job_event>& events, size_t max_events);

// "id: N\nevent: TYPE\ndata: {event_object}\n\n".
std::string sse_frame(const store::job_event& e);

// What a stream reads: events with id > after in id order, at most limit; and when it ends.
struct event_feed {
  std::function<std::vector<store::job_event>(int64_t after, int32_t limit)> read;
  // Checked when the feed is idle; true = send what landed since and close. Empty = never ends.
  std::function<bool()> ended;
};

// A streaming text/event-stream response: replays the feed after `after`, then follows it
// (woken by this process's commits, else polling every 500 ms), with a comment line after
// `keepalive` of silence, until the client goes or the feed ends.
http::response sse_response(store::store* st, event_feed feed, int64_t after, std::chrono::milliseconds keepalive);

}  // namespace agentq::api
