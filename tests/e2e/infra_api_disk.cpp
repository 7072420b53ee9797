// Fault scenarios (docs/RELIABILITY.md, "Infrastructure faults"): the API process killed with -9
// in the middle of a submit burst (retrying clients with Idempotency-Keys: every 202'd job exists
// and ends, no key ever makes two jobs), and the SQLite disk filling up (a small tmpfs under the
// data dir, or the API process's RLIMIT_FSIZE at 0: clean 503s, no corruption, back to normal after).
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <sys/resource.h>

#include <atomic>
#include <memory>

#include "cluster.h"
#include "history_check.h"
#include "infra_faults.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;

TEST_CASE("API kill -9 during a submit burst: every 202 ends, no Idempotency-Key makes two jobs") {
  test::cluster c;
  const int n_threads = 4, n_per_thread = 25;
  std::atomic<int> n_no_response{0}, n_existing{0}, n_created{0}, n_bad_answers{0};
  std::mutex mu;
  std::vector<std::string> all_ids;  // one per key: 202 (created) or 200 (an earlier attempt had committed)
  std::vector<std::thread> clients;
  for (int t = 0; t < n_threads; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < n_per_thread; ++i) {
        std::string key = "burst-" + std::to_string(t) + "-" + std::to_string(i);
        json body = test::tiny_job(c.webhook_url(), key);
        // a retrying client: same key, same body, until the server answers
        for (int attempt = 0;; ++attempt) {
          auto x = c.client().call("POST", "/v1/jobs", body.dump(), 5s, {{"Idempotency-Key", key}});
          if (x.status == 202 || x.status == 200) {
            (x.status == 202 ? n_created : n_existing)++;
            std::lock_guard lock(mu);
            all_ids.push_back(json::parse(x.response)["id"].get<std::string>());
            std::this_thread::sleep_for(10ms);
            break;
          }
          if (x.status == 0) n_no_response++;
          if (x.status != 0 && x.status < 500) {  // NOTE: no REQUIRE off the test's thread
            n_bad_answers++;
            break;
          }
          std::this_thread::sleep_for(100ms);
        }
      }
    });
  // kill once the burst is under way (10 keys answered); the clients pace themselves (10 ms per key),
  // so most of the burst is still ahead on any machine
  test::eventually([&] { return n_created + n_existing >= 10; }, 20s, 1ms);
  c.api().kill9();
  std::this_thread::sleep_for(1s);
  c.restart_api();
  for (auto& t : clients) t.join();
  MESSAGE("burst: " << n_threads * n_per_thread << " keys, " << n_created.load() << " answered 202, "
                    << n_existing.load() << " answered 200 on a retry (an unanswered attempt had committed), "
                    << n_no_response.load() << " attempts without a response");
  CHECK(n_no_response > 0);  // the kill landed inside the burst
  CHECK(n_bad_answers == 0);
  REQUIRE(all_ids.size() == size_t(n_threads * n_per_thread));
  CHECK(c.wait_terminal(all_ids, 40s));
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "api-kill9-submit-burst");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, n_created);
  // no key made two jobs; every key made one
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(c.db_path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  auto dup = test::detail::query(db,
                                 "SELECT COUNT(*) FROM (SELECT idempotency_key FROM jobs WHERE idempotency_key "
                                 "LIKE 'burst-%' GROUP BY tenant, idempotency_key HAVING COUNT(*) > 1)");
  auto keys =
      test::detail::query(db, "SELECT COUNT(DISTINCT idempotency_key) FROM jobs WHERE idempotency_key LIKE 'burst-%'");
  sqlite3_close(db);
  CHECK(dup.at(0).at(0) == "0");
  CHECK(keys.at(0).at(0) == std::to_string(n_threads * n_per_thread));
}

// NOTE: without the right to mount a tmpfs (CAP_SYS_ADMIN), or with AGENTQ_TEST_DISK_FULL=rlimit, the
// disk is "full" for the API process only: its file-size limit drops to 0 (prlimit RLIMIT_FSIZE), so
// every write it makes fails with EFBIG (agentqd ignores SIGXFSZ), as it would with ENOSPC.
TEST_CASE("SQLite disk full (small tmpfs, else RLIMIT_FSIZE): clean 503, no corruption, recovers when space returns") {
  const char* mode = std::getenv("AGENTQ_TEST_DISK_FULL");
  bool use_rlimit = mode && std::string(mode) == "rlimit";
  std::unique_ptr<test::small_tmpfs> fs;
  test::cluster_options o;
  if (!use_rlimit)
    o.prepare_data_dir = [&fs](const std::filesystem::path& dir) {
      fs = std::make_unique<test::small_tmpfs>(dir, 24 << 20);
    };
  test::cluster c(o);
  use_rlimit = use_rlimit || !fs->mounted();
  auto before = test::submit_tiny(c, 5, "disk-before");
  REQUIRE(c.wait_terminal(before, 30s));
  auto filler = c.data_dir() / "filler";
  rlimit saved{};
  REQUIRE(::prlimit(c.api().pid(), RLIMIT_FSIZE, nullptr, &saved) == 0);
  if (use_rlimit) {
    rlimit none{0, saved.rlim_max};
    REQUIRE(::prlimit(c.api().pid(), RLIMIT_FSIZE, &none, nullptr) == 0);
    MESSAGE("no tmpfs here: the API's RLIMIT_FSIZE is 0, every write it makes fails (EFBIG)");
  } else {
    size_t n_filled = test::small_tmpfs::fill(filler);
    MESSAGE("filled " << (n_filled >> 10) << " KiB: the data dir's file system is full");
  }
  int n_5xx = 0, n_202 = 0, n_other = 0;
  std::vector<std::string> during;
  for (int i = 0; i < 20; ++i) {
    auto x =
        c.client().call("POST", "/v1/jobs", test::tiny_job(c.webhook_url(), "disk-full-" + std::to_string(i)).dump());
    if (x.status >= 500) {
      ++n_5xx;
      CHECK(x.status == 503);  // a transient store failure: retry later
      if (n_5xx == 1) MESSAGE("answer while full: " << x.status << " " << x.response);
      json e = json::parse(x.response, nullptr, false);
      CHECK_MESSAGE((e.is_object() && e["error"]["type"].is_string()), x.response);
    } else if (x.status == 202) {
      ++n_202;
      during.push_back(json::parse(x.response)["id"].get<std::string>());
    } else {
      ++n_other;
      MESSAGE("unexpected answer while the disk is full: " << x.status << " " << x.error << " " << x.response);
    }
  }
  MESSAGE("while full: " << n_5xx << " x 5xx, " << n_202 << " x 202 (room left in the WAL), " << n_other << " other");
  CHECK(n_5xx > 0);
  CHECK(n_other == 0);
  CHECK(c.api().running());
  CHECK(c.client().call("GET", "/healthz").status == 200);
  if (use_rlimit)
    REQUIRE(::prlimit(c.api().pid(), RLIMIT_FSIZE, &saved, nullptr) == 0);
  else
    std::filesystem::remove(filler);
  auto after = test::submit_tiny(c, 5, "disk-after");
  CHECK(after.size() == 5);
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "sqlite-disk-full");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 10 + n_202);
}
