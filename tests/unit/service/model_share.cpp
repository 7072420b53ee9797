// The stated policy by which a worker process shares its device between the models it serves
// (worker/model_share.h, #28): CPU cores split evenly unless --engine-threads is given; each
// model's KV pool is the whole --kv-budget-mb; the advert's "share" object says so.
#include "worker/model_share.h"

#include <doctest/doctest.h>

using agentq::worker::share_models;

TEST_CASE("one model keeps every core; several split them; an explicit count is each engine's") {
  auto one = share_models("cpu", 1, 0, 512, 16);
  CHECK(one.rule == "all_cores");
  CHECK(one.n_threads_each == 0);  // the engine's default: every core
  auto split = share_models("cpu", 3, 0, 512, 16);
  CHECK(split.rule == "split_cores");
  CHECK(split.n_threads_each == 5);
  CHECK(share_models("cpu", 4, 0, 512, 2).n_threads_each == 1);  // never 0: at least one each
  CHECK(share_models("cpu", 2, 0, 512, 0).n_threads_each == 1);  // cores unknown: taken as 1
  auto each = share_models("cpu", 3, 4, 512, 2);
  CHECK(each.rule == "threads_each");
  CHECK(each.n_threads_each == 4);  // oversubscribed on purpose: the operator asked
}

TEST_CASE("memory: each model's pool is the whole budget, on the process's one device") {
  auto gpu = share_models("cuda:1", 2, 0, 2048, 8);
  CHECK(gpu.kv_budget_mb_each == 2048);
  CHECK(gpu.device == "cuda:1");
  CHECK(share_models("", 1, 0, 64, 8).device == "cpu");
  auto j = gpu.to_json();
  CHECK(j["rule"] == "split_cores");
  CHECK(j["models"] == 2);
  CHECK(j["threads_each"] == 4);
  CHECK(j["kv_budget_mb_each"] == 2048);
  CHECK(j["device"] == "cuda:1");
}
