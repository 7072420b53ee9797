// The control-plane pieces of agentqd (#28): model headers instead of engines for --role api,
// the fleet catalog (models known from workers' adverts, validated with the headers they
// publish), and a worker process's header publisher.
#pragma once

#include <memory>
#include <string>

#include "api/fleet_catalog.h"
#include "api/model_catalog.h"
#include "daemon/config.h"
#include "queue/model_headers.h"
#include "queue/queue.h"

namespace agentq::daemon {

// --role api: each --model's GGUF header (tokenizer, chat template, hyper-parameters; no weights).
// false with *error (as engine loading's) on failure.
bool load_model_headers(const config& c, api::header_catalog& out, std::string* error);

// The API's catalog: local's models, plus the fleet's for --model-ttl-h (cache in DATA_DIR/fleet-models).
// Started.
std::unique_ptr<api::fleet_catalog> start_fleet_catalog(const config& c, const api::model_catalog& local,
                                                         queue::queue& q);

// A worker process: keeps each --model's header in Redis for control planes. Started; nullptr +
// *error when a model's header cannot be read.
std::unique_ptr<queue::header_publisher> start_header_publisher(const config& c, const queue::queue_options& qopts,
                                                                std::string* error);

}  // namespace agentq::daemon
