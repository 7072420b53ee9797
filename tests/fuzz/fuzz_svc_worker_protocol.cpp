// libFuzzer target: the control plane's remote-worker endpoint (api/worker_protocol.h) over
// arbitrary request bodies, on a real SQLite store with one claimed job: it must never crash, and
// always answer 200 with one reply per message (each with a known status) or a 4xx JSON error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "api/worker_protocol.h"
#include "auth/keys.h"
#include "obs/obs_store.h"
#include "store/store.h"

namespace {

struct world {
  // first, so it goes last: the directory is removed at exit after the stores closed (unit.fuzz_replay
  // runs this in every suite run)
  struct remover {
    std::string d = "/tmp/fuzz_worker_protocol." + std::to_string(getpid());
    ~remover() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } dir_owner;
  std::unique_ptr<agentq::store::store> st;
  std::unique_ptr<agentq::auth::key_store> keys;
  std::unique_ptr<agentq::obs::obs_store> obs;
  std::unique_ptr<agentq::api::worker_protocol> wp;
  world() {
    const std::string& dir = dir_owner.d;
    std::filesystem::create_directories(dir);
    std::string err;
    agentq::store::store_options o;
    o.path = dir + "/agentq.db";
    st = agentq::store::store::open(o, &err);
    keys = agentq::auth::key_store::open(o.path, &err);
    obs = agentq::obs::obs_store::open(o.path, &err);
    if (!st || !keys || !obs) std::abort();
    agentq::store::new_job nj;
    nj.tenant = "t1";
    nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
    auto id = st->create_job(nj).get().job.id;
    st->claim_job(id, "w1", 600000, 100).get();
    agentq::api::worker_protocol_options po;  // the current protocol (the seeds' v2 is within its range)
    po.token = "tok";
    wp = agentq::api::worker_protocol::open(po, *st, obs.get(), *keys, o.path, &err);
    if (!wp) std::abort();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static world w;
  agentq::http::request req;
  req.method = "POST";
  req.path = "/v1/worker/messages";
  req.headers.push_back({"authorization", "Bearer tok"});
  req.body.assign(reinterpret_cast<const char*>(data), size);
  auto res = w.wp->handle(req);
  auto body = nlohmann::json::parse(res.body, nullptr, false);
  if (body.is_discarded()) std::abort();
  if (res.status == 200) {
    for (const auto& r : body.at("replies")) {
      const std::string s = r.at("status").get<std::string>();
      if (s != "ok" && s != "fenced" && s != "not_found" && s != "invalid" && s != "error") std::abort();
    }
  } else if (res.status < 400 || res.status >= 500) {
    std::abort();
  }
  return 0;
}
