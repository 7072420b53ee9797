// The batch runner's output files over a real SQLite store (issue 29): while a batch runs, the lines
// whose jobs have ended are written ahead into its output files in line order (a line whose output
// still depends on how the batch ends is left to finalize), and the finished files are the lines
// finalize builds from the jobs, in order, whether the batch completes or is cancelled.
#include "api/batch_runner.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "api/batch_input.h"
#include "api/batch_map.h"
#include "api/batch_specs.h"
#include "api/model_catalog.h"
#include "net/ssrf_guard.h"
#include "store/batch_store.h"
#include "store/store.h"
#include "accepted_batch.h"
#include "temp_dir.h"
#include "util/crypto.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

struct fake_catalog : api::model_catalog {
  std::vector<api::model_info> list() const override { return {{"tiny", "llama", 64, true}}; }
  std::optional<std::string> validate(const std::string&, const turn_request&) const override { return std::nullopt; }
};

struct fixture {
  test::temp_dir dir;
  std::unique_ptr<store::store> db;
  std::unique_ptr<store::batch_store> batches;
  std::string files;
  std::unique_ptr<api::batch_runner> runner;

  explicit fixture(std::chrono::milliseconds count_interval = std::chrono::milliseconds(25)) {
    std::string err;
    store::store_options so;
    so.path = dir.file("jobs.db");
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    batches = store::batch_store::open(so.path, &err);
    REQUIRE_MESSAGE(batches, err);
    files = (dir.path() / "files").string();
    std::filesystem::create_directories(files);
    api::batch_runner_options o;
    o.files_dir = files;
    o.render_interval = std::chrono::milliseconds(0);  // every pass
    o.count_interval = count_interval;
    runner = std::make_unique<api::batch_runner>(o, api::batch_runner_deps{db.get(), batches.get()});
  }
  // A validating batch of the tenant "t" over the input file file_id (for acceptance to take).
  store::batch_row new_batch(const std::string& file_id) {
    store::batch_row b;
    b.tenant = "t";
    b.key_id = "key_t";
    b.endpoint = "/v1/chat/completions";
    b.input_file_id = file_id;
    b.completion_window = "24h";
    b.expires_ms = batches->now() + 86400000;
    auto made = batches->create_batch(b);
    REQUIRE(made);
    return *made;
  }
  // An in_progress batch of n lines; lines in refused were refused at acceptance (no job).
  store::batch_row batch(int64_t n, std::vector<int64_t> refused = {}) {
    auto made = test::accepted_batch(*batches, "t", n, refused);
    REQUIRE(batches->transition(made.id, store::batch_status::validating, store::batch_status::in_progress, {},
                                {{"n_total", n}}));
    return *batches->get_batch(made.id, "");
  }
  std::string job_of(const store::batch_row& b, int64_t line) {
    auto rows = batches->results(b.id, line, 1);
    REQUIRE(rows.size() == 1);
    return rows[0].job_id;
  }
  void complete(const store::batch_row& b, int64_t line) {
    auto id = job_of(b, line);
    auto c = db->claim_job(id, "w", 60000, 3).get();
    REQUIRE(c.outcome == store::claim_outcome::claimed);
    REQUIRE(db->finish_job(id, c.won->epoch, store::job_status::completed, "{}", "", {}).get() ==
            store::write_status::ok);
  }
  std::string part(const store::batch_row& b, const char* kind) {
    return files + "/file-" + crypto::sha256_hex(b.id + "/" + kind).substr(0, 24) + ".jsonl.part";
  }
  std::vector<json> read_lines(const std::string& path) {
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  }
  // Passes until the batch leaves its open states; its final row.
  store::batch_row run_to_end(const store::batch_row& b) {
    for (int i = 0; i < 400; ++i) {
      runner->run_once();
      auto now = batches->get_batch(b.id, "");
      REQUIRE(now);
      if (now->status != store::batch_status::in_progress && now->status != store::batch_status::cancelling &&
          now->status != store::batch_status::finalizing)
        return *now;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("the batch did not finalize");
    return b;
  }
  // What finalize writes for the line: api::batch_output_line over the job and its transcript now.
  json expected(const store::batch_row& b, int64_t line, const std::string& why) {
    auto r = batches->results(b.id, line, 1).at(0);
    std::optional<store::job_row> job;
    std::vector<store::transcript_row> transcript;
    if (!r.job_id.empty()) {
      job = db->get_job(r.job_id);
      if (job) transcript = db->read_transcript(r.job_id);
    }
    return json::parse(api::batch_output_line(b.endpoint, r, job ? &*job : nullptr, transcript, why).line);
  }
};

}  // namespace

TEST_CASE("batch runner: ended lines are written ahead in line order; the files are finalize's") {
  fixture f;
  auto b = f.batch(4, {2});
  f.runner->run_once();
  // line 1 ended but line 0 did not: nothing may be written yet (the files keep line order)
  f.complete(b, 1);
  f.runner->run_once();
  CHECK(f.read_lines(f.part(b, "output")).empty());
  // line 0 ends: lines 0-1 are written, and the refused line 2 (its error is its own) to the errors
  f.complete(b, 0);
  f.runner->run_once();
  auto out = f.read_lines(f.part(b, "output"));
  REQUIRE(out.size() == 2);  // fails where output files are written only by finalize
  CHECK(out[0]["custom_id"] == "r0");
  CHECK(out[1]["custom_id"] == "r1");
  CHECK(out[0] == f.expected(b, 0, ""));
  auto errs = f.read_lines(f.part(b, "errors"));
  REQUIRE(errs.size() == 1);
  CHECK(errs[0]["custom_id"] == "r2");
  CHECK(f.batches->get_batch(b.id, "")->status == store::batch_status::in_progress);

  f.complete(b, 3);
  auto done = f.run_to_end(b);
  CHECK(done.status == store::batch_status::completed);
  CHECK(done.n_completed == 3);
  CHECK(done.n_failed == 1);
  REQUIRE(!done.output_file_id.empty());
  out = f.read_lines(f.files + "/" + done.output_file_id + ".jsonl");
  REQUIRE(out.size() == 3);
  CHECK(out[0] == f.expected(b, 0, ""));
  CHECK(out[1] == f.expected(b, 1, ""));
  CHECK(out[2] == f.expected(b, 3, ""));
  errs = f.read_lines(f.files + "/" + done.error_file_id + ".jsonl");
  REQUIRE(errs.size() == 1);
  CHECK(errs[0] == f.expected(b, 2, ""));
  CHECK(!std::filesystem::exists(f.part(b, "output")));
}

TEST_CASE("batch runner: a line written ahead stays; the lines a cancel ends read batch_cancelled") {
  fixture f;
  auto b = f.batch(3);
  f.complete(b, 0);
  f.runner->run_once();
  REQUIRE(f.read_lines(f.part(b, "output")).size() == 1);
  REQUIRE(f.batches->transition(b.id, store::batch_status::in_progress, store::batch_status::cancelling));
  auto done = f.run_to_end(b);
  CHECK(done.status == store::batch_status::cancelled);
  CHECK(done.n_completed == 1);
  CHECK(done.n_failed == 2);
  auto out = f.read_lines(f.files + "/" + done.output_file_id + ".jsonl");
  REQUIRE(out.size() == 1);
  CHECK(out[0] == f.expected(b, 0, "batch_cancelled"));
  auto errs = f.read_lines(f.files + "/" + done.error_file_id + ".jsonl");
  REQUIRE(errs.size() == 2);
  CHECK(errs[0]["custom_id"] == "r1");
  CHECK(errs[1]["custom_id"] == "r2");
  CHECK(errs[0]["error"]["code"] == "batch_cancelled");
  CHECK(errs[1] == f.expected(b, 2, "batch_cancelled"));
}

TEST_CASE("batch runner: a batch whose last line is written finalizes then, not at its next count") {
  fixture f(std::chrono::seconds(60));  // the count clock alone would wait a minute
  auto b = f.batch(3);
  f.runner->run_once();  // in_progress seen: counts read, the next due in 60 s
  f.complete(b, 0);
  f.complete(b, 1);
  f.runner->run_once();
  CHECK(f.batches->get_batch(b.id, "")->status == store::batch_status::in_progress);
  f.complete(b, 2);
  f.runner->run_once();  // fails where only the count clock leads to finalize
  auto done = *f.batches->get_batch(b.id, "");
  CHECK(done.status == store::batch_status::completed);
  CHECK(done.n_completed == 3);
  CHECK(f.read_lines(f.files + "/" + done.output_file_id + ".jsonl").size() == 3);
}

TEST_CASE("batch runner: acceptance commits a small first chunk, so its jobs can run while the rest is mapped") {
  fixture f;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += json{{"custom_id", "r" + std::to_string(i)},
                 {"method", "POST"},
                 {"url", "/v1/chat/completions"},
                 {"body", {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}}}}
                .dump() +
            "\n";
  { std::ofstream(f.files + "/in.jsonl") << text; }
  store::file_row file{
      "file-in",       "t", "batch", "in.jsonl", int64_t(text.size()), 300, "/v1/chat/completions", "in.jsonl",
      f.batches->now()};
  REQUIRE(f.batches->add_file(file));
  auto made = f.new_batch("file-in");
  fake_catalog cat;
  net::ssrf_guard guard(std::vector<net::cidr>{});
  api::batch_runner_options o;
  o.files_dir = f.files;
  o.chunk_lines = 5000;
  o.first_chunk_lines = 256;
  api::batch_runner runner(o, api::batch_runner_deps{f.db.get(), f.batches.get(), &cat, &guard});
  runner.run_once();
  auto now = f.batches->get_batch(made.id, "");
  REQUIRE(now->status == store::batch_status::in_progress);
  CHECK(now->n_total == 300);
  // a chunk's job ids share a random prefix ("job_" + 16 hex digits): lines 0-255 were one write
  // transaction, 256-299 the next (fails where the 300 lines were one chunk)
  auto rows = f.batches->results(made.id, 0, 1000);
  REQUIRE(rows.size() == 300);
  std::set<std::string> prefixes;
  for (auto& r : rows) prefixes.insert(r.job_id.substr(0, 20));
  CHECK(prefixes.size() == 2);
  CHECK(rows[0].job_id.substr(0, 20) == rows[255].job_id.substr(0, 20));
  CHECK(rows[255].job_id.substr(0, 20) != rows[256].job_id.substr(0, 20));
}

// Acceptance reads a line's job spec from the upload's sidecar (api/batch_specs.h) when the record
// is there, hashes to the line and names a model listed as it was; any other line is mapped from its
// text. Either way the jobs are the ones mapping makes (the same file accepted without the sidecar);
// a record is trusted as written (line 5's marked one shows it was read).
TEST_CASE("batch runner: acceptance takes the upload's mapped lines where they match, and maps the rest") {
  fixture f;
  fake_catalog cat;
  net::ssrf_guard guard(std::vector<net::cidr>{});
  const int n = 40;
  std::string text;
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    json body = {{"model", "tiny"},
                 {"messages", json::array({{{"role", "user"}, {"content", "doc \"" + std::to_string(i) + "\" caf\xc3\xa9"}}})}};
    if (i % 3 == 0) body["max_completion_tokens"] = 1 + i;
    lines.push_back(json{{"custom_id", "r\"" + std::to_string(i)}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                         {"body", body}}
                        .dump());
    text += lines.back() + (i % 4 == 1 ? "\r\n" : "\n");
    if (i == 20) text += "  \n";  // a blank line is not a request
  }
  { std::ofstream(f.files + "/in.jsonl", std::ios::binary) << text; }
  {
    api::specs_writer w(f.files + "/in.jsonl.specs");
    for (int i = 0; i < n; ++i) {
      std::string why, param;
      auto r = api::parse_batch_line(lines[i], &why, &param);
      REQUIRE(r);
      api::validation_error err;
      bool store = true;
      auto spec = api::batch_line_spec(r->url, r->body, cat, guard, api::validation_limits{}, &err, &store);
      REQUIRE(spec);
      auto m = api::map_for_sidecar(lines[i], *spec, r->custom_id, store, cat.list());
      REQUIRE(m);
      if (i == 5) {  // marked: read from the sidecar, it shows
        (*spec)["marked"] = true;
        m = api::map_for_sidecar(lines[i], *spec, r->custom_id, store, cat.list());
      }
      if (i == 7) m->line_hash ^= 1;             // not this line's: mapped
      if (i == 9) m->model = "tiny\nchanged";    // the model changed since: mapped
      w.append(api::specs_writer::record(i == 11 ? std::nullopt : m));  // 11: no record: mapped
    }
    REQUIRE(w.commit());
  }
  store::file_row file{"file-in", "t", "batch", "in.jsonl", int64_t(text.size()), n, "/v1/chat/completions", "in.jsonl",
                       f.batches->now()};
  REQUIRE(f.batches->add_file(file));
  api::batch_runner_options o;
  o.files_dir = f.files;
  o.first_chunk_lines = 16;  // three chunks
  o.chunk_lines = 16;
  api::batch_runner runner(o, api::batch_runner_deps{f.db.get(), f.batches.get(), &cat, &guard});
  auto accept = [&] {
    auto made = f.new_batch("file-in");
    runner.run_once();
    auto now = f.batches->get_batch(made.id, "");
    REQUIRE(now->status == store::batch_status::in_progress);
    REQUIRE(now->n_total == n);
    std::vector<store::job_row> jobs;
    for (auto& r : f.batches->results(made.id, 0, 1000)) {
      auto j = f.db->get_job(r.job_id);
      REQUIRE(j);
      jobs.push_back(*j);
    }
    REQUIRE(jobs.size() == size_t(n));
    return std::make_pair(made.id, jobs);
  };
  auto [with_id, with] = accept();
  std::filesystem::remove(f.files + "/in.jsonl.specs");
  auto [without_id, without] = accept();
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    std::string a = with[size_t(i)].request_json;
    const auto at = a.find(with_id);
    REQUIRE(at != std::string::npos);
    a.replace(at, with_id.size(), without_id);
    if (i == 5) {
      CHECK(json::parse(a)["marked"] == true);
      CHECK_FALSE(json::parse(without[size_t(i)].request_json).contains("marked"));
    } else {
      CHECK(a == without[size_t(i)].request_json);
    }
    CHECK(json::parse(a)["batch"]["custom_id"] == "r\"" + std::to_string(i));
  }
}
