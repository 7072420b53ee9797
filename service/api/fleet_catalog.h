// Models known from the fleet (#28): a model only workers load is known to the API for
// model_ttl_h hours after a live worker last advertised it. Jobs for it are validated with its
// GGUF header, which the workers publish through Redis (queue/model_headers.h): the same checks
// and messages as for a model the API loads itself. A local model (--model) shadows a fleet one
// of the same name. Headers and last-seen times are kept in cache_dir across restarts.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/model_catalog.h"
#include "queue/model_headers.h"

namespace agentq::api {

struct fleet_catalog_options {
  double model_ttl_h = 24;        // a model no live worker advertised for this long is forgotten (0: live only)
  std::string cache_dir;          // headers seen (DATA_DIR/fleet-models); empty = memory only
  int64_t poll_ms = 1000;         // how often the adverts are read
  int64_t persist_every_ms = 60000;  // last_seen_ms written to cache_dir at most this often per model
  std::function<int64_t()> clock;    // unix ms; null = the system clock (tests set their own)
};

// How the catalog sees the fleet; called from its poll thread only.
struct fleet_source {
  std::function<std::vector<std::string>()> list_workers;  // live workers' adverts (JSON text each)
  // "digest\nchat_family" of a model's published header, "" when none, nullopt on an error.
  std::function<std::optional<std::string>(const std::string& model)> header_version;
  std::function<std::optional<queue::published_header>(const std::string& model)> fetch_header;
};

class fleet_catalog : public model_catalog {
 public:
  fleet_catalog(const model_catalog& local, fleet_catalog_options options, fleet_source source);
  ~fleet_catalog() override;

  void start();  // loads cache_dir, then polls every poll_ms
  void stop();   // and writes the last-seen times to cache_dir
  void poll_once();   // one poll (the thread's body; tests)
  void load_cache();  // the models of cache_dir still within the TTL

  std::vector<model_info> list() const override;
  // Also the KV-room check (#28): a prompt that does not fit the pool of every live worker serving
  // the model (none live: of those seen within the TTL) is refused as an engine would refuse it.
  std::optional<std::string> validate(const std::string& model, const turn_request& request) const override;
  // The rooms (kv_room) the check uses: the live workers' serving model (at the last poll), else
  // those of the workers that advertised it within the TTL; one per worker id.
  std::vector<kv_room> rooms(const std::string& model) const;

 private:
  struct advertised_room {
    kv_room room;
    int64_t last_seen_ms = 0;
  };
  struct entry {
    std::shared_ptr<const model_header> header;
    std::string version;         // "digest\nchat_family"
    int64_t last_seen_ms = 0;
    int64_t persisted_ms = 0;    // last_seen_ms as written to cache_dir
    std::string arch;            // from the advert (the header's when none)
  };
  bool fresh(const entry& e, int64_t now_ms) const;
  bool fresh_ms(int64_t last_seen_ms, int64_t now_ms) const;
  int64_t now_ms() const;
  void persist(const std::string& name, entry& e);
  bool is_local(const std::string& name) const;

  const model_catalog& local_;
  fleet_catalog_options options_;
  fleet_source source_;
  mutable std::mutex mu_;
  std::map<std::string, entry> entries_;  // guarded by mu_
  std::map<std::string, std::map<std::string, advertised_room>> rooms_;  // model -> worker id -> room; mu_
  int64_t last_poll_ms_ = 0;  // mu_: the last poll's time (a room seen then is live)
  std::map<std::string, int64_t> warned_ms_;      // poll thread: models advertised without a usable header
  std::map<std::string, int64_t> missing_since_;  // poll thread: advertised, no header published since
  std::mutex run_mu_;
  std::condition_variable cv_;
  bool running_ = false;
  std::thread thread_;
};

}  // namespace agentq::api
