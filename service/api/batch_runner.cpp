// Batch acceptance, progress, cancel / expiry and finalization (see batch_runner.h).
#include "api/batch_runner.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/batch_feeder.h"
#include "api/batch_input.h"
#include "api/batch_map.h"
#include "api/batch_specs.h"
#include "api/json_text.h"
#include "api/model_catalog.h"
#include "store/store.h"
#include "util/crypto.h"
#include "util/fault.h"
#include "util/split_loop.h"
#include <agentq/thread_class.h>

namespace agentq::api {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// An output file written to `<dir>/<id>.jsonl.part`, fsynced and renamed into place by commit().
class jsonl_writer {
 public:
  jsonl_writer(const std::string& dir, std::string id) : id_(std::move(id)) {
    path_ = (fs::path(dir) / (id_ + ".jsonl")).string();
    fd_ = ::open((path_ + ".part").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  ~jsonl_writer() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0 && !failed_; }
  void add(std::string_view line) {
    buf_.append(line);
    buf_ += '\n';
    ++n_lines_;
    if (buf_.size() >= (1 << 20)) flush();
  }
  bool commit() {
    flush();
    if (fd_ < 0 || failed_ || ::fsync(fd_) != 0) return false;
    ::close(fd_);
    fd_ = -1;
    std::error_code ec;
    fs::rename(path_ + ".part", path_, ec);
    return !ec;
  }
  int64_t n_lines() const { return n_lines_; }
  int64_t bytes() const { return bytes_; }
  const std::string& id() const { return id_; }
  // Write the buffered lines to the .part file (not synced: commit() does that).
  void flush() {
    size_t off = 0;
    while (fd_ >= 0 && off < buf_.size()) {
      ssize_t n = ::write(fd_, buf_.data() + off, buf_.size() - off);
      if (n <= 0) {
        failed_ = true;
        break;
      }
      off += size_t(n);
    }
    bytes_ += int64_t(buf_.size());
    buf_.clear();
  }

 private:
  std::string id_, path_, buf_;
  int fd_ = -1;
  bool failed_ = false;
  int64_t n_lines_ = 0, bytes_ = 0;
};

// The models as the upload saw them, minus the engine's prompt check.
// NOTE: every line passed the engine's check (schemas, prompt length) when its file was uploaded
// (POST /v1/files); acceptance maps the lines again to build their specs and skips that check,
// which tokenized every prompt a second time. A model removed since then fails the lines' mapping
// (error lines); a job that no longer fits fails on its worker like any other.
class prechecked_catalog : public model_catalog {
 public:
  explicit prechecked_catalog(const model_catalog& inner) : models_(inner.list()) {}
  std::vector<model_info> list() const override { return models_; }
  std::optional<std::string> validate(const std::string&, const turn_request&) const override { return std::nullopt; }

 private:
  std::vector<model_info> models_;
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

std::string errors_list(const std::string& code, const std::string& message, int64_t line) {
  json e = {{"code", code}, {"message", message}, {"param", nullptr}, {"line", line > 0 ? json(line) : json(nullptr)}};
  return json{{"object", "list"}, {"data", json::array({e})}}.dump();
}

// Output files stay open for at most this many running batches at once (two descriptors each).
constexpr size_t k_max_rendering = 8;
// Lines written ahead per batch per pass (render_ready).
constexpr int64_t k_lines_per_pass = 4096;

std::string output_file_id(const std::string& batch_id, const char* kind) {
  // NOTE: file ids derive from the batch id, so finalizing again after a crash rewrites the same files.
  return "file-" + crypto::sha256_hex(batch_id + "/" + kind).substr(0, 24);
}

// A line whose output no longer depends on how the batch ends: its job is terminal (and not a
// cancellation before it ran, which reads "batch_cancelled" or "batch_expired"), or it was refused
// at acceptance with its own error. Such a line may be written before the batch finalizes.
bool line_is_final(const store::batch_result& r, const store::job_row* job) {
  if (r.job_id.empty()) {
    if (r.error_json.empty()) return false;
    return json::parse(r.error_json, nullptr, false).is_object();
  }
  if (!job || !store::is_terminal(job->status)) return false;
  return !(job->status == store::job_status::cancelled && job->started_ms == 0);
}

}  // namespace

struct batch_runner::output_progress {
  output_progress(const std::string& dir, const std::string& batch_id)
      : out(dir, output_file_id(batch_id, "output")), errs(dir, output_file_id(batch_id, "errors")) {}
  bool ok() const { return out.ok() && errs.ok(); }
  jsonl_writer out, errs;
  int64_t next_line = 0;  // line_idx of the first line not written yet
  int64_t n_completed = 0, n_failed = 0;
  std::chrono::steady_clock::time_point next_render{};
  std::chrono::milliseconds interval{0};  // until next_render after the last pass
};

batch_runner::batch_runner(batch_runner_options options, batch_runner_deps deps)
    : options_(std::move(options)), deps_(deps) {}

batch_runner::~batch_runner() { stop(); }

void batch_runner::start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] {
    util::name_thread("aq-batch");  // per-thread profiles name it (acceptance, counts, output files)
    while (running_) {
      try {
        run_once();
      } catch (const std::exception& e) {
        spdlog::error("batch: pass failed: {}", e.what());
      }
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, until_next_count(), [&] { return woken_ || !running_; });
      woken_ = false;
    }
  });
}

std::chrono::milliseconds batch_runner::until_next_count() const {
  auto wait = options_.poll;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [id, c] : count_clock_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.next - now);
    wait = std::min(wait, std::max(left, std::chrono::milliseconds(1)));
  }
  for (const auto& [id, p] : rendered_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p->next_render - now);
    wait = std::min(wait, std::max(left, std::chrono::milliseconds(1)));
  }
  return wait;
}

void batch_runner::stop() {
  if (!running_.exchange(false)) return;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void batch_runner::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void batch_runner::run_once() {
  const auto open = deps_.batches->list_open();
  // NOTE: a clock outlives its batch only if the batch left in_progress some other way; a stale one
  // would keep the thread's wait at 1 ms (until_next_count).
  std::erase_if(count_clock_, [&](const auto& kv) {
    return std::none_of(open.begin(), open.end(), [&](const store::batch_row& b) {
      return b.id == kv.first && b.status == store::batch_status::in_progress;
    });
  });
  // Output files of a batch no longer open (finalize takes its own; this is one deleted meanwhile).
  for (auto it = rendered_.begin(); it != rendered_.end();) {
    bool is_open = std::any_of(open.begin(), open.end(), [&](const store::batch_row& b) { return b.id == it->first; });
    if (is_open) {
      ++it;
      continue;
    }
    std::error_code ec;
    for (const char* kind : {"output", "errors"})
      fs::remove(fs::path(options_.files_dir) / (output_file_id(it->first, kind) + ".jsonl.part"), ec);
    it = rendered_.erase(it);
  }
  for (const auto& b : open) {
    if (!running_ && thread_.joinable()) return;
    switch (b.status) {
      case store::batch_status::validating: ingest(b); break;
      case store::batch_status::in_progress: watch(b, false); break;
      case store::batch_status::cancelling: cancel_open(b); break;
      case store::batch_status::finalizing: finalize(b, b.status, store::batch_status::completed, ""); break;
      default: break;
    }
  }
}

void batch_runner::fail(const store::batch_row& b, const std::string& code, const std::string& message) {
  spdlog::warn("batch {}: failed: {}", b.id, message);
  deps_.batches->transition(b.id, b.status, store::batch_status::failed, {{"errors_json", errors_list(code, message, 0)}});
  auto now = deps_.batches->get_batch(b.id, "");
  if (now) deps_.batches->enqueue_webhooks(*now, "batch.failed");
}

// Lines from n_accepted on become jobs, chunk_lines per transaction.
void batch_runner::ingest(const store::batch_row& b) {
  auto file = deps_.batches->get_file(b.input_file_id, b.tenant);
  if (!file) return fail(b, "invalid_file", "the input file " + b.input_file_id + " was deleted");
  std::ifstream in(fs::path(options_.files_dir) / file->path, std::ios::binary);
  if (!in) return fail(b, "invalid_file", "the input file " + b.input_file_id + " cannot be read");
  auto t0 = std::chrono::steady_clock::now();
  prechecked_catalog catalog(*deps_.catalog);
  // The upload's mapped lines (batch_specs.h), for a file whose requests name the batch's endpoint:
  // a record is taken for the line it hashes to while its model is listed as it was; any other line
  // is mapped below.
  std::unique_ptr<specs_reader> specs;
  if (file->endpoints == b.endpoint)
    specs = specs_reader::open((fs::path(options_.files_dir) / file->path).string() + ".specs");
  std::unordered_set<std::string> model_sigs;
  if (specs)
    for (const auto& m : catalog.list()) model_sigs.insert(model_signature(m));
  int64_t n_from_specs = 0;
  double cpu0 = thread_cpu_s();
  int64_t start = b.n_accepted, idx = 0;
  std::vector<store::batch_line> chunk;
  chunk.reserve(size_t(options_.chunk_lines));
  // NOTE: the first chunk is small, so the first jobs are committed and published (and run) while
  // the rest is mapped: a 4,000-line file in one 5,000-line chunk ran nothing for the ~0.2 s its
  // acceptance took on a 2-vCPU Zen 3 (docs/queue_perf.md "Session 25").
  int32_t chunk_limit = std::min(options_.first_chunk_lines, options_.chunk_lines);
  std::string text;
  std::vector<std::string> texts;  // the chunk's lines, mapped at its flush
  texts.reserve(size_t(options_.chunk_lines));
  // NOTE: parsing and mapping the next chunk overlaps the write transaction of the one before (a
  // second thread writes; at most one chunk waits, so memory stays bounded by two chunks).
  std::mutex wmu;
  std::condition_variable wcv;
  std::optional<std::pair<std::vector<store::batch_line>, int64_t>> pending;  // (lines, next line)
  bool writer_done = false, write_failed = false;
  double write_s = 0;  // in accept_chunk
  double writer_cpu_s = 0;
  std::thread writer([&] {
    util::name_thread("aq-batch-write");  // per-thread profiles name it
    struct cpu_note {
      double& out;
      ~cpu_note() { out = thread_cpu_s(); }
    } note{writer_cpu_s};
    for (;;) {
      std::pair<std::vector<store::batch_line>, int64_t> job;
      {
        std::unique_lock lock(wmu);
        wcv.wait(lock, [&] { return pending.has_value() || writer_done; });
        if (!pending) return;
        job = std::move(*pending);
        pending.reset();
      }
      wcv.notify_all();
      auto w0 = std::chrono::steady_clock::now();
      bool ok = deps_.batches->accept_chunk(b, job.first, job.second, store::job_priority::batch);
      write_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      if (ok) fault_point("after_batch_chunk", b.id);  // crash tests: a chunk committed, the next not
      if (ok && deps_.feeder) deps_.feeder->wake();
      if (!ok) {
        std::lock_guard lock(wmu);
        write_failed = true;  // retried from n_accepted next pass
        wcv.notify_all();
        return;
      }
    }
  });
  // A line -> its job row (or its refusal): parse, check the endpoint, map, the spec as text.
  auto map_line = [&](store::batch_line& l, const std::string& line) {
    std::string why, param;
    auto r = parse_batch_line(line, &why, &param);
    validation_error err;
    std::optional<json> spec;
    if (r) {
      l.custom_id = r->custom_id;
      if (r->url != b.endpoint) {
        why = "'url' " + r->url + " is not the batch's endpoint " + b.endpoint;
        param = "url";
      } else {
        spec = batch_line_spec(r->url, r->body, catalog, *deps_.guard, options_.limits, &err, &l.store_content);
        if (!spec) {
          why = err.message;
          param = err.param.empty() ? "body" : "body." + err.param;
        }
      }
    } else {
      l.custom_id = "line-" + std::to_string(l.line_idx + 1);
    }
    if (spec) {
      (*spec)["batch"] = {{"id", b.id}, {"custom_id", l.custom_id}};
      l.request_json = document_text(*spec);
    } else {
      l.error_json = json{{"code", "invalid_request"}, {"message", why}, {"param", param}}.dump();
    }
  };
  // NOTE: a chunk's lines are read here and mapped by two threads (this one and aq-batch-map, half
  // each) while the writer commits the chunk before: mapping was the slower of the two stages once
  // the writer's rows went in as multi-row INSERTs (docs/queue_perf.md "Session 37").
  util::split_loop mapper("aq-batch-map");
  const double map_cpu0 = mapper.helper_cpu_s();
  const util::split_loop::range_fn map_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (chunk[i].request_json.empty()) map_line(chunk[i], texts[i]);  // else read from the specs
  };
  auto flush = [&]() -> bool {
    if (chunk.empty()) return true;
    if (!texts.empty()) {  // not yet mapped (a chunk whose hand-off failed is mapped already)
      mapper.run(chunk.size(), map_range);
      texts.clear();
    }
    std::unique_lock lock(wmu);
    wcv.wait(lock, [&] { return !pending.has_value() || write_failed; });
    if (write_failed) return false;
    pending.emplace(std::move(chunk), idx);
    chunk = {};
    chunk.reserve(size_t(options_.chunk_lines));
    wcv.notify_all();
    return true;
  };
  auto finish_writes = [&]() -> bool {
    {
      std::unique_lock lock(wmu);
      wcv.wait(lock, [&] { return !pending.has_value() || write_failed; });
      writer_done = true;
    }
    wcv.notify_all();
    writer.join();
    return !write_failed;
  };
  while (std::getline(in, text)) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are not requests
    int64_t line_idx = idx++;
    std::optional<mapped_line> rec;
    if (specs) rec = specs->next();  // one a request line, those accepted before a restart too
    if (line_idx < start) continue;  // accepted before a restart
    store::batch_line& l = chunk.emplace_back();
    l.line_idx = line_idx;
    if (rec && rec->line_hash == line_hash(text) && model_sigs.count(rec->model)) {
      l.custom_id = std::move(rec->custom_id);
      l.store_content = rec->store_content;
      l.request_json = spliced_request(*rec, b.id);
      ++n_from_specs;
      texts.emplace_back();
    } else {
      texts.push_back(std::move(text));
    }
    text = {};
    if (int32_t(chunk.size()) >= chunk_limit) {
      if (!flush()) break;
      chunk_limit = options_.chunk_lines;
    }
  }
  flush();
  if (!finish_writes()) return;  // a chunk's write failed: retried from n_accepted next pass
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("batch {}: {} lines accepted as jobs in {:.2f} s ({:.0f} lines/s; {:.2f} s writing; CPU {:.2f} s "
               "reading and mapping, {:.2f} s writing; {} read mapped from the upload's specs)",
               b.id, idx - start, s, s > 0 ? double(idx - start) / s : 0.0, write_s,
               thread_cpu_s() - cpu0 + mapper.helper_cpu_s() - map_cpu0,
               writer_cpu_s, n_from_specs);
  deps_.batches->transition(b.id, store::batch_status::validating, store::batch_status::in_progress, {},
                            {{"n_total", idx}});
  if (auto now = deps_.batches->get_batch(b.id, "")) watch(*now, true);
}

void batch_runner::watch(const store::batch_row& b, bool force_count) {
  auto now_tp = std::chrono::steady_clock::now();
  bool expired = deps_.batches->now() >= b.expires_ms;
  // Every line written ahead: the batch's jobs have all ended, so its counts are read now rather
  // than at its count clock (which may be up to count_interval late when its rate changed).
  const bool all_written = !expired && render_ready(b);
  auto& clock = count_clock_[b.id];
  if (!force_count && !all_written && !expired && now_tp < clock.next) return;
  auto c = deps_.batches->counts(b.id);
  {
    using ms = std::chrono::milliseconds;
    ms next = options_.count_interval;
    const int64_t done = c.n_completed + c.n_failed;
    if (clock.n_done >= 0 && done > clock.n_done && c.n_open > 0) {
      const double per_ms = double(done - clock.n_done) /
                            std::max<double>(1.0, std::chrono::duration<double, std::milli>(now_tp - clock.at).count());
      next = std::clamp(ms(int64_t(double(c.n_open) / per_ms)), ms(20), options_.count_interval);
    }
    clock = {now_tp + next, now_tp, done};
  }
  if (c.n_completed != b.n_completed || c.n_failed != b.n_failed)
    deps_.batches->set_counts(b.id, c.n_completed, c.n_failed);
  if (expired) {
    cancel_open(b);
    return finalize(b, store::batch_status::in_progress, store::batch_status::expired, "batch_expired");
  }
  if (c.n_open == 0 && c.n_lines >= b.n_total) {
    if (!deps_.batches->transition(b.id, store::batch_status::in_progress, store::batch_status::finalizing)) return;
    finalize(b, store::batch_status::finalizing, store::batch_status::completed, "");
  }
}

// NOTE: finalizing reads each line's job and transcript and builds its JSON (~50-75 us a line on a
// 2-vCPU Zen 3): done at the end, a 4,000-line batch spent ~0.2-0.3 s on one core after its last
// job, the other idle. Lines written here while the jobs run leave finalize the last few.
bool batch_runner::render_ready(const store::batch_row& b) {
  const auto now_tp = std::chrono::steady_clock::now();
  auto it = rendered_.find(b.id);
  if (it == rendered_.end()) {
    if (rendered_.size() >= k_max_rendering) return false;
    auto p = std::make_unique<output_progress>(options_.files_dir, b.id);
    if (!p->ok()) return false;  // finalize reports it
    it = rendered_.emplace(b.id, std::move(p)).first;
  }
  auto& p = *it->second;
  if (now_tp < p.next_render) return false;
  if (!p.ok()) {  // a failed write: finalize starts the files over; no pass before its count is due
    p.next_render = now_tp + options_.count_interval;
    return false;
  }
  const int64_t first = p.next_line;
  // NOTE: at most k_lines_per_pass a pass (~0.25 s), so a backlog (a restart mid-batch) does not
  // hold up the other batches' acceptance; the rest follows in the next passes.
  for (bool more = true; more && p.next_line - first < k_lines_per_pass;) {
    auto rows = deps_.batches->results(b.id, p.next_line, 256);
    more = rows.size() == 256;
    // NOTE: the rows' jobs in one read, then the transcripts of the lines that are final, in another
    // (issue 29: two reads of their own per line were most of this thread's SQLite work per job).
    std::vector<std::string> ids;
    for (const auto& r : rows)
      if (!r.job_id.empty()) ids.push_back(r.job_id);
    auto found = deps_.store->get_jobs(ids);
    std::vector<std::optional<store::job_row>> jobs(rows.size());
    size_t n_final = 0;
    for (size_t i = 0, k = 0; i < rows.size(); ++i) {
      if (!rows[i].job_id.empty()) jobs[i] = std::move(found[k++]);
      if (!line_is_final(rows[i], jobs[i] ? &*jobs[i] : nullptr)) {
        more = false;
        break;
      }
      n_final = i + 1;
    }
    ids.clear();
    for (size_t i = 0; i < n_final; ++i)
      if (jobs[i]) ids.push_back(rows[i].job_id);
    auto transcripts = deps_.store->read_transcripts(ids);
    for (size_t i = 0, k = 0; i < n_final; ++i) {
      const auto& r = rows[i];
      static const std::vector<store::transcript_row> none;
      const auto& transcript = jobs[i] ? transcripts[k++] : none;
      auto line = batch_output_line(b.endpoint, r, jobs[i] ? &*jobs[i] : nullptr, transcript, "");
      (line.is_error ? p.errs : p.out).add(line.line);
      (line.is_error ? p.n_failed : p.n_completed)++;
      p.next_line = r.line_idx + 1;
    }
  }
  if (p.next_line > first) {
    // NOTE: one write a pass keeps the lines out of the heap (a big batch's output), not synced.
    p.out.flush();
    p.errs.flush();
  }
  // An idle batch (long jobs, a stalled worker) backs off to count_interval.
  using ms = std::chrono::milliseconds;
  p.interval = p.next_line > first ? options_.render_interval
                                   : std::min(options_.count_interval, std::max({p.interval * 2, options_.render_interval, ms(1)}));
  if (options_.render_interval.count() == 0) p.interval = ms(0);
  p.next_render = now_tp + p.interval;
  return p.next_line > first && p.next_line >= b.n_total;
}

// Cancel every job of the batch not yet terminal; a cancelling batch then finalizes as cancelled.
void batch_runner::cancel_open(const store::batch_row& b) {
  for (;;) {
    auto ids = deps_.batches->open_jobs(b.id, 4096);
    if (ids.empty()) break;
    std::vector<std::future<store::write_status>> pending;
    pending.reserve(ids.size());
    for (const auto& id : ids) pending.push_back(deps_.store->cancel_job(id));
    int64_t n_failed = 0;
    for (auto& f : pending)
      if (f.get() == store::write_status::error) ++n_failed;
    if (n_failed > 0) return;  // the store is failing writes: next pass
    if (int32_t(ids.size()) < 4096) break;
  }
  if (b.status == store::batch_status::cancelling)
    finalize(b, store::batch_status::cancelling, store::batch_status::cancelled, "batch_cancelled");
}

void batch_runner::finalize(const store::batch_row& b, store::batch_status from, store::batch_status to,
                            const std::string& why) {
  // The lines written ahead while the batch ran (render_ready) stay; a failed finalize drops them with
  // p, and the next pass starts the files over.
  std::unique_ptr<output_progress> p;
  if (auto it = rendered_.find(b.id); it != rendered_.end()) {
    p = std::move(it->second);
    rendered_.erase(it);
  }
  if (!p || !p->ok()) p = std::make_unique<output_progress>(options_.files_dir, b.id);
  if (!p->ok()) {
    spdlog::error("batch {}: cannot create output files in {}", b.id, options_.files_dir);
    return;
  }
  auto& out = p->out;
  auto& errs = p->errs;
  int64_t& n_completed = p->n_completed;
  int64_t& n_failed = p->n_failed;
  for (int64_t from_line = p->next_line;;) {
    auto rows = deps_.batches->results(b.id, from_line, 1000);
    if (rows.empty()) break;
    for (const auto& r : rows) {
      std::optional<store::job_row> job;
      std::vector<store::transcript_row> transcript;
      if (!r.job_id.empty()) {
        job = deps_.store->get_job(r.job_id);
        if (job) transcript = deps_.store->read_transcript(r.job_id);
      }
      auto line = batch_output_line(b.endpoint, r, job ? &*job : nullptr, transcript, why);
      (line.is_error ? errs : out).add(line.line);
      (line.is_error ? n_failed : n_completed)++;
    }
    from_line = rows.back().line_idx + 1;
  }
  // Lines never accepted (a batch cancelled or expired while validating) are error lines too: one
  // output line per request, read back from the input file.
  int64_t n_seen = n_completed + n_failed;
  if (!why.empty() && n_seen < b.n_total) {
    auto file = deps_.batches->get_file(b.input_file_id, b.tenant);
    std::ifstream in;
    if (file) in.open(fs::path(options_.files_dir) / file->path, std::ios::binary);
    std::string text;
    int64_t idx = 0;
    while (in && idx < b.n_total && std::getline(in, text)) {
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      int64_t line_idx = idx++;
      if (line_idx < n_seen) continue;
      std::string w, param;
      auto r = parse_batch_line(text, &w, &param);
      store::batch_result never{line_idx, r ? r->custom_id : "line-" + std::to_string(line_idx + 1), "", ""};
      errs.add(batch_output_line(b.endpoint, never, nullptr, {}, why).line);
      ++n_failed;
    }
  }
  std::vector<std::pair<std::string, std::string>> cols;
  for (auto* w : {&out, &errs}) {
    if (w->n_lines() == 0) continue;
    if (!w->commit()) {
      spdlog::error("batch {}: writing {} failed", b.id, w->id());
      return;
    }
    store::file_row f{w->id(), b.tenant, "batch_output", w->id() + ".jsonl", w->bytes(), w->n_lines(), "",
                      w->id() + ".jsonl", deps_.batches->now()};
    if (!deps_.batches->add_file(f)) return;
    cols.emplace_back(w == &out ? "output_file_id" : "error_file_id", w->id());
  }
  std::error_code ec;
  for (auto* w : {&out, &errs})
    if (w->n_lines() == 0) fs::remove(fs::path(options_.files_dir) / (w->id() + ".jsonl.part"), ec);
  if (!deps_.batches->transition(b.id, from, to, cols, {{"n_completed", n_completed}, {"n_failed", n_failed}})) return;
  count_clock_.erase(b.id);
  spdlog::info("batch {}: {} ({} completed, {} failed)", b.id, store::to_string(to), n_completed, n_failed);
  if (auto now = deps_.batches->get_batch(b.id, ""))
    deps_.batches->enqueue_webhooks(*now, std::string("batch.") + store::to_string(to));
}

}  // namespace agentq::api
