// agentq-bench_restart: KV across a restart (issue 31), one JSON line per run. J jobs each run a
// first turn over a --context-token conversation and park (a requires_action wait); the engine
// writes its resident KV to the spill directory (spill_for_shutdown: GB/s) and goes; the same
// bytes are then written with plain write + fsync (the disk's own rate, same run, same dir); a
// new engine on that directory resumes every job with --new tokens (restore), and a third engine
// without a disk tier runs the same prompts (re-prefill): wall time and computed tokens of each.
//   agentq-bench_restart --model F --spill-dir DIR [--context 4000] [--new 64] [--gen 16] [--jobs 1]
//                        [--threads N] [--kv-mib M] [--device cpu|cuda|cuda:N] [--shutdown-s 60]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "agentq/engine.h"

using namespace agentq;
namespace fs = std::filesystem;

namespace {

struct args {
  std::string model, spill_dir, device = "cpu";
  int context = 4000, new_tokens = 64, gen = 16, jobs = 1, threads = 0;
  double kv_mib = 1024, shutdown_s = 60;
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: agentq-bench_restart --model F --spill-dir DIR [options] (see the file header)\n");
  std::exit(2);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    if (k == "--model") a.model = v;
    else if (k == "--spill-dir") a.spill_dir = v;
    else if (k == "--device") a.device = v;
    else if (k == "--context") a.context = std::stoi(v);
    else if (k == "--new") a.new_tokens = std::stoi(v);
    else if (k == "--gen") a.gen = std::stoi(v);
    else if (k == "--jobs") a.jobs = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--kv-mib") a.kv_mib = std::stod(v);
    else if (k == "--shutdown-s") a.shutdown_s = std::stod(v);
    else usage();
  }
  if (a.model.empty() || a.spill_dir.empty() || a.context < 64 || a.jobs < 1) usage();
  return a;
}

std::unique_ptr<engine> open(const args& a, bool disk_tier) {
  engine_config c;
  c.model_path = a.model;
  c.device = a.device;
  c.n_threads = a.threads;
  c.kv_budget_bytes = uint64_t(a.kv_mib * 1024 * 1024);
  c.spill_dir = disk_tier ? a.spill_dir : "";
  c.kv_spill_after_s = -1;  // NOTE: only the shutdown spill writes (what is measured)
  std::string err;
  auto e = engine::load(c, &err);
  if (!e) {
    std::fprintf(stderr, "agentq-bench_restart: %s\n", err.c_str());
    std::exit(1);
  }
  return e;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

token_id tok(const engine& e, uint64_t x) {
  x = (x + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  const int32_t lo = 3, span = e.model().n_vocab - lo;
  return token_id(lo + int32_t((x >> 33) % uint64_t(span)));
}

struct turn_out {
  std::vector<std::vector<token_id>> outputs;
  int64_t computed = 0, cached = 0;
  double wall_s = 0;
};

// Run one turn of every job to the end (greedy), stepping on this thread.
turn_out run_turns(engine& e, const std::vector<std::vector<token_id>>& prompts, int gen) {
  turn_out out;
  out.outputs.resize(prompts.size());
  size_t n_done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t j = 0; j < prompts.size(); ++j) {
    token_request r;
    r.job_key = j + 1;
    r.arrival_seq = j;
    r.prompt = prompts[j];
    r.max_tokens = gen;
    r.stop_tokens = {};
    token_callbacks cb;
    cb.on_done = [&, j](token_result res) {
      out.outputs[j] = res.output_ids;
      out.computed += res.usage.n_tokens_computed;
      out.cached += res.usage.n_tokens_cached;
      ++n_done;
    };
    e.submit(std::move(r), std::move(cb));
  }
  while (n_done < prompts.size()) e.step();
  out.wall_s = seconds_since(t0);
  return out;
}

// The disk's own sequential write rate: n_bytes in n_files files, write(2) + fsync each, GB/s.
double disk_write_gbps(const std::string& dir, int64_t n_bytes, int n_files) {
  std::vector<char> buf(8 << 20, 'x');
  const int64_t per = n_bytes / std::max(1, n_files);
  const auto t0 = std::chrono::steady_clock::now();
  for (int f = 0; f < n_files; ++f) {
    const std::string path = dir + "/disk-rate-" + std::to_string(f) + ".bin";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    for (int64_t left = per; left > 0;) {
      const ssize_t w = ::write(fd, buf.data(), size_t(std::min<int64_t>(left, int64_t(buf.size()))));
      if (w <= 0) break;
      left -= w;
    }
    ::fsync(fd);
    ::close(fd);
  }
  const double s = seconds_since(t0);
  for (int f = 0; f < n_files; ++f) fs::remove(dir + "/disk-rate-" + std::to_string(f) + ".bin");
  return s > 0 ? double(per * n_files) / s / 1e9 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  fs::create_directories(a.spill_dir);
  std::vector<std::vector<token_id>> first, resume;
  kv_shutdown_report rep;
  {
    auto e = open(a, true);
    if (a.context + a.gen + a.new_tokens > e->model().n_ctx) {
      std::fprintf(stderr, "agentq-bench_restart: --context %d + --gen %d + --new %d exceeds the model's n_ctx %d\n",
                   a.context, a.gen, a.new_tokens, e->model().n_ctx);
      return 2;
    }
    for (int j = 0; j < a.jobs; ++j) {
      std::vector<token_id> p;
      for (int i = 0; i < a.context; ++i) p.push_back(tok(*e, uint64_t(j) * 1000003 + uint64_t(i)));
      first.push_back(std::move(p));
    }
    const turn_out t1 = run_turns(*e, first, a.gen);
    for (int j = 0; j < a.jobs; ++j) {
      e->park(uint64_t(j) + 1, 300);  // a client tool: pinned in memory
      std::vector<token_id> p = first[size_t(j)];
      p.insert(p.end(), t1.outputs[size_t(j)].begin(), t1.outputs[size_t(j)].end());
      for (int i = 0; i < a.new_tokens; ++i) p.push_back(tok(*e, uint64_t(j) * 7919 + uint64_t(i) + 555));
      resume.push_back(std::move(p));
    }
    e->step();  // applies the parks
    rep = e->spill_for_shutdown(a.shutdown_s);
  }
  const double spill_gbps = rep.ms > 0 ? double(rep.n_bytes) / (rep.ms * 1e6) : 0;
  const double disk_gbps = disk_write_gbps(a.spill_dir, rep.n_bytes, std::max(1, rep.n_written));
  turn_out restored, reprefill;
  int64_t n_restores = 0;
  {
    auto e = open(a, true);  // the restarted process: the index is rebuilt from the directory
    restored = run_turns(*e, resume, a.gen);
    n_restores = e->stats().n_restores;
  }
  {
    auto e = open(a, false);
    reprefill = run_turns(*e, resume, a.gen);
  }
  bool same = restored.outputs == reprefill.outputs;
  std::printf(
      "{\"bench\":\"restart\",\"model\":\"%s\",\"device\":\"%s\",\"jobs\":%d,\"context\":%d,\"new\":%d,\"gen\":%d,"
      "\"shutdown_spill\":{\"seqs\":%d,\"tokens\":%lld,\"bytes\":%lld,\"ms\":%.2f,\"dropped\":%d,\"gbps\":%.3f},"
      "\"disk_write_gbps\":%.3f,\"spill_vs_disk\":%.2f,"
      "\"resume_restored\":{\"wall_s\":%.3f,\"computed_tokens\":%lld,\"cached_tokens\":%lld,\"restores\":%lld},"
      "\"resume_reprefill\":{\"wall_s\":%.3f,\"computed_tokens\":%lld},\"speedup\":%.2f,\"same_output\":%s}\n",
      a.model.c_str(), a.device.c_str(), a.jobs, a.context, a.new_tokens, a.gen, rep.n_seqs,
      (long long)rep.n_tokens, (long long)rep.n_bytes, rep.ms, rep.n_dropped, spill_gbps, disk_gbps,
      disk_gbps > 0 ? spill_gbps / disk_gbps : 0, restored.wall_s, (long long)restored.computed,
      (long long)restored.cached, (long long)n_restores, reprefill.wall_s, (long long)reprefill.computed,
      restored.wall_s > 0 ? reprefill.wall_s / restored.wall_s : 0, same ? "true" : "false");
  return same && n_restores == a.jobs ? 0 : 1;
}
