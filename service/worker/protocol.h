// The remote-worker message protocol (#28; docs/deploy.md "Remote workers"): the JSON a remote
// worker sends to POST /v1/worker/messages and the control plane's replies, plus the codecs of
// the store types they carry. Parsing throws (nlohmann::json errors, std::invalid_argument) on
// malformed input; the control plane catches once per message and replies "invalid".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "obs/obs_store.h"
#include "store/store.h"

namespace agentq::worker::protocol {

using json = nlohmann::json;

// The message protocol this binary speaks by default (1 was "direct SQLite": no messages). A control
// plane accepts v in [own - 1, own + 1]. 3: the reads of a job's content (job, transcript,
// tool_results) carry the reader's lease epoch, and are answered only under the current lease
// (2 sent epoch 0 there, which a control plane takes as "the sender's current lease").
inline constexpr int k_message_version = 3;
inline constexpr const char* k_path = "/v1/worker/messages";

// A message: {v, msg_id, worker_id, incarnation, job_id, epoch, kind, body}. msg_id is
// "<worker_id>:<incarnation>:<seq>", unique per message; a retried batch carries the same ids.
// Kinds that write: claim, fence, renew, init_transcript, commit_turn, tool_result, event,
// require_action, finish, release, timeline, timeline_close, engine_sample. Kinds that read: job,
// job_models, transcript, tool_results, cancelled_among, live_kv_keys.
bool is_known_kind(const std::string& kind);
bool is_read_kind(const std::string& kind);
// Writes the control plane records in applied_messages (a repeat gets the first reply): all but the
// reads and the naturally repeatable ones (renew, fence, engine_sample), which would only fill the table.
bool is_recorded_kind(const std::string& kind);
// A reply: {msg_id, status: ok|fenced|not_found|invalid|error, result?, error?}.

json to_json(const store::job_row& r);
store::job_row job_row_from_json(const json& j);
json to_json(const store::transcript_row& r);
store::transcript_row transcript_row_from_json(const json& j);
json to_json(const store::tool_output& o);
store::tool_output tool_output_from_json(const json& j);
json to_json(const store::turn_commit& t);
store::turn_commit turn_commit_from_json(const json& j);
json to_json(const obs::timeline_entry& e);
obs::timeline_entry timeline_entry_from_json(const json& j);
obs::engine_sample engine_sample_from_json(const json& j);  // obs::to_json is the other way

std::optional<store::write_status> parse_write_status(const std::string& s);
const char* to_string(store::claim_outcome o);
std::optional<store::claim_outcome> parse_claim_outcome(const std::string& s);

}  // namespace agentq::worker::protocol
