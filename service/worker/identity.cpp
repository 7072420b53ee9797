// Stable worker identities: id files and their flock()s in the data directory (see identity.h).
#include "worker/identity.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "util/crypto.h"

namespace agentq::worker {

namespace fs = std::filesystem;

namespace {

constexpr int k_max_slots = 64;

// An exclusive, non-blocking flock on path; -1 if another process holds it (or it cannot be opened).
int try_lock(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string h;
  for (char* p = host; *p; ++p) h += worker_identity::valid_id(std::string(1, *p)) ? *p : '-';
  return h.empty() ? "worker" : h.substr(0, 40);
}

std::string read_id(const fs::path& file) {
  std::ifstream in(file);
  std::string id;
  std::getline(in, id);
  return worker_identity::valid_id(id) ? id : std::string();
}

bool write_id(const fs::path& file, const std::string& id) {
  fs::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << id << "\n";
    if (!out.flush()) return false;
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  return !ec;
}

}  // namespace

worker_identity::~worker_identity() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

bool worker_identity::valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return false;
  return true;
}

std::string worker_identity::sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += valid_id(std::string(1, c)) ? c : '-';
  return out.empty() ? "-" : out;
}

std::unique_ptr<worker_identity> worker_identity::acquire(const std::string& explicit_id, const std::string& data_dir,
                                                          std::string* error) {
  std::unique_ptr<worker_identity> out(new worker_identity());
  out->incarnation_ = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count()) +
                      "-" + std::to_string(::getpid()) + "-" + crypto::to_hex(crypto::random_bytes(4));
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::path(data_dir), ec);
  if (ec) dir = data_dir;
  fs::create_directories(dir, ec);
  if (!explicit_id.empty()) {
    if (!valid_id(explicit_id)) {
      if (error) *error = "--worker-id must be 1-64 characters of A-Z a-z 0-9 . _ -";
      return nullptr;
    }
    out->lock_fd_ = try_lock(dir / ("worker-id." + explicit_id + ".lock"));
    if (out->lock_fd_ < 0) {
      if (error) *error = "worker id '" + explicit_id + "' is in use by another process on " + dir.string();
      return nullptr;
    }
    out->id_ = explicit_id;
    return out;
  }
  // NOTE: slots, not one id per directory: today workers that share a database share its data dir,
  // and each needs its own id; a restart takes the lowest free slot, so N workers keep their N ids.
  const std::string base = host_name() + "-" + crypto::sha256_hex(dir.string()).substr(0, 8);
  for (int slot = 0; slot < k_max_slots; ++slot) {
    const std::string suffix = slot == 0 ? "" : "." + std::to_string(slot);
    int fd = try_lock(dir / ("worker-id" + suffix + ".lock"));
    if (fd < 0) continue;
    fs::path file = dir / ("worker-id" + suffix);
    std::string id = read_id(file);
    if (id.empty()) {
      id = slot == 0 ? base : base + "-" + std::to_string(slot);
      if (!write_id(file, id)) {
        ::close(fd);
        if (error) *error = "cannot write " + file.string();
        return nullptr;
      }
    }
    out->lock_fd_ = fd;
    out->id_ = id;
    return out;
  }
  if (error) *error = "every worker identity slot of " + dir.string() + " is held by a live process";
  return nullptr;
}

}  // namespace agentq::worker
