// worker_tokens (worker_tokens.h): the --worker-tokens-file parser, its reload, and token -> ids.
#include "api/worker_tokens.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "util/crypto.h"
#include "worker/identity.h"

namespace agentq::api {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<std::map<std::string, std::string>> parse_worker_tokens(const std::string& text, std::string* error) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    auto fail = [&](const std::string& why) -> std::optional<std::map<std::string, std::string>> {
      if (error) *error = "line " + std::to_string(n) + ": " + why;  // NOTE: never the line itself (a token)
      return std::nullopt;
    };
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream fields(line);
    std::string id, token, extra;
    if (!(fields >> id)) continue;  // blank or a comment
    if (!(fields >> token)) return fail("expected \"WORKER_ID TOKEN\"");
    if (fields >> extra) return fail("expected \"WORKER_ID TOKEN\" and nothing after");
    if (!worker::worker_identity::valid_id(id)) return fail("not a worker id (1-64 of A-Z a-z 0-9 . _ -)");
    if (token.size() < 16) return fail("a token needs at least 16 characters");
    if (!out.emplace(id, token).second) return fail("worker id '" + id + "' appears twice");
  }
  return out;
}

bool worker_id_covered(const std::string& scope_id, const std::string& worker_id) {
  return worker_id == scope_id ||
         (worker_id.size() > scope_id.size() + 1 && worker_id.compare(0, scope_id.size(), scope_id) == 0 &&
          worker_id[scope_id.size()] == '.');
}

worker_tokens::worker_tokens(std::string shared, std::string path)
    : shared_(std::move(shared)), path_(std::move(path)) {}

bool worker_tokens::reload(std::string* error) {
  if (path_.empty()) return true;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (error) *error = "cannot read the worker tokens file '" + path_ + "'";
    return false;
  }
  std::ifstream in(path_, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (!in && !in.eof()) {
    if (error) *error = "cannot read the worker tokens file '" + path_ + "'";
    return false;
  }
  std::string err;
  auto parsed = parse_worker_tokens(text, &err);
  std::lock_guard lock(mu_);
  mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  size_ = int64_t(st.st_size);
  if (!parsed) {
    // NOTE: a bad edit keeps the tokens in force (a typo must not lock the whole fleet out).
    if (error) *error = "worker tokens file '" + path_ + "': " + err + " (the previous tokens stay in force)";
    return false;
  }
  tokens_ = std::move(*parsed);
  return true;
}

void worker_tokens::reload_if_changed() {
  if (path_.empty()) return;
  {
    std::lock_guard lock(mu_);
    const int64_t now = steady_ms();
    if (now < next_check_ms_) return;
    next_check_ms_ = now + 1000;
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0 &&
        int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec == mtime_ns_ && int64_t(st.st_size) == size_)
      return;
  }
  std::string err;
  if (reload(&err))
    spdlog::info("worker tokens reloaded from {}: {} worker(s)", path_, size());
  else
    spdlog::warn("{}", err);
}

std::optional<std::vector<std::string>> worker_tokens::ids_of(const std::string& token) {
  if (token.empty()) return std::nullopt;
  std::optional<std::vector<std::string>> out;
  if (!shared_.empty() && crypto::constant_time_equal(token, shared_)) out = std::vector<std::string>{};
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  // NOTE: every entry is compared (no early exit), so the time does not tell which one matched.
  for (const auto& [id, t] : tokens_)
    if (crypto::constant_time_equal(token, t)) ids.push_back(id);
  if (out) return out;
  if (ids.empty()) return std::nullopt;
  return ids;
}

size_t worker_tokens::size() const {
  std::lock_guard lock(mu_);
  return tokens_.size();
}

}  // namespace agentq::api
