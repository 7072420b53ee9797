// Per-worker credentials for POST /v1/worker/messages (#28): --worker-tokens-file FILE holds
// "worker_id token" lines; a token is good for its worker id only (and that process's model
// workers, "<id>.<model>"). Reloaded when the file changes (checked at most once a second) and
// on SIGHUP; revoking a worker = removing its line. The fleet-wide --worker-token still works.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace agentq::api {

// The file's entries: worker id -> token. nullopt + *error naming the line for a malformed file
// (a line is "ID TOKEN"; '#' starts a comment; blank lines are skipped; an id once; a token of
// at least 16 characters; ids as --worker-id: 1-64 of A-Z a-z 0-9 . _ -).
std::optional<std::map<std::string, std::string>> parse_worker_tokens(const std::string& text, std::string* error);

// Whether a credential for scope_id covers the messages of worker_id: the same id, or one of
// that process's model workers ("<scope_id>.<model>").
bool worker_id_covered(const std::string& scope_id, const std::string& worker_id);

class worker_tokens {
 public:
  // shared: the fleet-wide token ("" = none); path: the tokens file ("" = none).
  worker_tokens(std::string shared, std::string path);

  // Reads the file now; false + *error when unreadable or malformed (the entries in force stay).
  bool reload(std::string* error);
  // Reloads if the file's mtime or size changed since the last look (at most once a second).
  void reload_if_changed();

  // Who presented token: nullopt = nobody (refuse, 401); "" = the shared token (any worker id);
  // else the worker ids whose line holds it. Constant-time comparisons.
  std::optional<std::vector<std::string>> ids_of(const std::string& token);
  size_t size() const;

 private:
  std::string shared_;
  std::string path_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> tokens_;  // worker id -> token; mu_
  int64_t mtime_ns_ = -1, size_ = -1;          // the file as last read; mu_
  int64_t next_check_ms_ = 0;                  // mu_
};

}  // namespace agentq::api
