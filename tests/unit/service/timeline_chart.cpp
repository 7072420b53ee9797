// `agentq status --timeline`: the text chart of a job.timeline object.
#include "client/timeline_chart.h"

#include <doctest/doctest.h>

using agentq::client::render_timeline;
using json = nlohmann::json;

TEST_CASE("one row per span, proportional bars, open spans, marks") {
  json t = {{"object", "job.timeline"},
            {"job_id", "job_x"},
            {"status", "running"},
            {"created_ms", 1000},
            {"finished_ms", nullptr},
            {"spans",
             {{{"kind", "queue_wait"},
               {"start_ms", 1000},
               {"end_ms", 1100},
               {"turn", nullptr},
               {"label", "queue wait"},
               {"attrs", json::object()}},
              {{"kind", "decode"},
               {"start_ms", 1100},
               {"end_ms", 1600},
               {"turn", 0},
               {"label", "turn 0 decode"},
               {"attrs", json::object()}},
              {{"kind", "tool"},
               {"start_ms", 1600},
               {"end_ms", nullptr},
               {"turn", 0},
               {"label", "look"},
               {"attrs", json::object()}}}},
            {"marks", {{{"kind", "claimed"}, {"at_ms", 1100}, {"label", "claimed by w1"}, {"attrs", json::object()}}}}};
  std::string out = render_timeline(t, 20, 2000);
  INFO(out);
  CHECK(out.find("job_x  running  1.00 s from submission to now") != std::string::npos);
  CHECK(out.find("|##                  |  queue wait") != std::string::npos);     // 100 of 1000 ms
  CHECK(out.find("|  ##########        |  turn 0 decode") != std::string::npos);  // 500 ms
  CHECK(out.find("|            >>>>>>>>|  look") != std::string::npos);           // open: '>' to now
  CHECK(out.find("400 ms+") != std::string::npos);
  CHECK(out.find("+100 ms  claimed") != std::string::npos);
}
