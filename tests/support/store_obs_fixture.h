// A real SQLite store with its observability tables in a temp dir, and a one-message job to
// work on: the setup the obs-store and worker-protocol tests share.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "obs/obs_store.h"
#include "store/store.h"
#include "temp_dir.h"

namespace agentq::test {

struct store_obs_fixture {
  temp_dir dir;
  std::string db_path;
  std::unique_ptr<store::store> st;
  std::unique_ptr<obs::obs_store> obs;

  explicit store_obs_fixture(const std::string& db_name = "agentq.db") : db_path(dir.file(db_name)) {
    std::string err;
    store::store_options o;
    o.path = db_path;
    st = store::store::open(o, &err);
    REQUIRE_MESSAGE(st, err);
    obs = obs::obs_store::open(db_path, &err);
    REQUIRE_MESSAGE(obs, err);
  }

  // A queued job of `tenant` with one user message.
  store::job_row new_job(const std::string& tenant = "t1") {
    store::new_job nj;
    nj.tenant = tenant;
    nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
    auto r = st->create_job(nj).get();
    REQUIRE(r.outcome == store::create_outcome::created);
    return r.job;
  }
};

}  // namespace agentq::test
