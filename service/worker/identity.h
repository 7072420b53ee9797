// A worker's stable identity (#28): --worker-id, or derived from the host name and the data
// directory and kept in DATA_DIR/worker-id, so a restarted worker is the same worker (its
// continuation stream, its pending Redis entries, its old leases). A lock file per identity keeps
// two live processes from using one.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace agentq::worker {

// An identity held by this process; the lock is released when it is destroyed (or the process dies).
class worker_identity {
 public:
  ~worker_identity();
  worker_identity(const worker_identity&) = delete;
  worker_identity& operator=(const worker_identity&) = delete;

  const std::string& id() const { return id_; }
  // A fresh token per start: tells this run's heartbeats from an older or a duplicate process's.
  const std::string& incarnation() const { return incarnation_; }

  // explicit_id non-empty: that id (checked: 1-64 of [A-Za-z0-9._-]), locked in data_dir. Empty: the
  // first free slot of data_dir (several workers may share one data dir on a host): slot 0's id is
  // "<host>-<8 hex of the data dir's path>", slot N's the same with "-N"; created once, then read back
  // from DATA_DIR/worker-id[.N]. nullptr with *error when the id is malformed or held by a live process.
  static std::unique_ptr<worker_identity> acquire(const std::string& explicit_id, const std::string& data_dir,
                                                  std::string* error);
  static bool valid_id(const std::string& id);
  // name with every character outside A-Z a-z 0-9 . _ - replaced by '-' (a model name in an id).
  static std::string sanitize(const std::string& name);

 private:
  worker_identity() = default;
  std::string id_, incarnation_;
  int lock_fd_ = -1;
};

}  // namespace agentq::worker
