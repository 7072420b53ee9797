// Helpers for the infrastructure fault scenarios and the load run (docs/RELIABILITY.md,
// "Infrastructure faults"): the tiniest job (one output token), submitting a batch through the
// cluster's recorded client, Redis introspection (stream length, the AOF file that grows), a small
// tmpfs for "disk full", and /proc samples (RSS, open fds) of a child process.
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <sys/mount.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cluster.h"
#include "history_check.h"

namespace agentq::test {

// One output token: the cheapest job that still goes API -> SQLite -> Redis -> worker -> engine.
inline json tiny_job(const std::string& webhook_url, const std::string& marker) {
  json j = text_job(webhook_url, marker, 1);
  j["max_output_tokens"] = 1;
  return j;
}

// Submit n tiny jobs (marker-<i>); the ids acknowledged with 202.
inline std::vector<std::string> submit_tiny(cluster& c, int n, const std::string& marker, bool webhook = true) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i)
    if (auto id = c.client().submit(tiny_job(webhook ? c.webhook_url() : "", marker + "-" + std::to_string(i))))
      ids.push_back(*id);
  return ids;
}

// An integer reply of one command (":12" -> 12); -1 when Redis did not answer with an integer.
inline int64_t redis_int(redis_server& r, const std::vector<std::string>& argv) {
  std::string line = r.command(argv);
  return line.size() > 1 && line[0] == ':' ? std::stoll(line.substr(1)) : -1;
}

// Entries in the normal-priority job streams tiny jobs go to: their model's (#28 routing) and the
// legacy model-less one (entries published by an older API, or re-routed).
inline int64_t n_stream_entries(redis_server& r) {
  int64_t routed = redis_int(r, {"XLEN", "agentq:jobs:stories260K:normal"});
  int64_t legacy = redis_int(r, {"XLEN", "agentq:jobs:normal"});
  return routed < 0 || legacy < 0 ? -1 : routed + legacy;
}

// Wait until pred() holds; false on timeout.
template <class P>
bool eventually(P pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds step = std::chrono::milliseconds(50)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(step);
  }
  return true;
}

// The AOF file Redis appends to: appendonlydir/<name>.<n>.incr.aof with the highest n (Redis 7
// multi-part AOF), or <dir>/appendonly.aof (Redis 6). Empty if none.
inline std::filesystem::path aof_tail_file(const std::filesystem::path& redis_dir) {
  std::filesystem::path best;
  int best_n = -1;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(redis_dir / "appendonlydir", ec)) {
    std::string name = e.path().filename().string();
    if (!name.ends_with(".incr.aof")) continue;
    std::string stem = name.substr(0, name.size() - 9);
    int n = std::atoi(stem.substr(stem.rfind('.') + 1).c_str());
    if (n > best_n) best_n = n, best = e.path();
  }
  if (best.empty() && std::filesystem::exists(redis_dir / "appendonly.aof")) best = redis_dir / "appendonly.aof";
  return best;
}

// A size-limited tmpfs mounted at dir (needs CAP_SYS_ADMIN); unmounted (lazily) on destruction.
class small_tmpfs {
 public:
  small_tmpfs(const std::filesystem::path& dir, size_t bytes) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  // NOTE: outlives the cluster that used it (declare it first): the mount point and its parent,
  // the cluster's temp dir, could not be removed while mounted; remove them once empty.
  ~small_tmpfs() {
    if (!mounted_) return;
    ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove(dir_, ec);
    std::filesystem::remove(dir_.parent_path(), ec);
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
  bool mounted() const { return mounted_; }

  // Write `path` in 64 KiB chunks until the file system is full (ENOSPC); bytes written.
  static size_t fill(const std::filesystem::path& path) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::vector<char> chunk(64 << 10, 'x');
    size_t n = 0;
    while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) n += chunk.size();
    std::fclose(f);
    return n;
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

// /proc figures of one process (Linux).
struct proc_sample {
  int64_t rss_kb = -1;  // VmRSS
  int64_t n_fds = -1;   // entries in /proc/<pid>/fd
};
inline proc_sample sample_proc(pid_t pid) {
  proc_sample s;
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(st, line);)
    if (line.starts_with("VmRSS:")) s.rss_kb = std::stoll(line.substr(6));
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    s.n_fds = 0;
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.') s.n_fds++;
    ::closedir(d);
  }
  return s;
}

// The common verdict of a fault scenario: the checker's summary, no violation, n_acked jobs
// acknowledged and every one of them ended by itself (completed or incomplete), none lost.
inline void expect_no_loss(const history_report& r, int64_t n_acked) {
  MESSAGE(r.summary());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == n_acked);
  CHECK(r.n_completed + r.n_incomplete == n_acked);
}

// p-th percentile (0..100) of v (sorted in place); 0 if empty.
inline double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = std::min(v.size() - 1, size_t(p / 100.0 * double(v.size())));
  return v[idx];
}

}  // namespace agentq::test
