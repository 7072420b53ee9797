// fleet_catalog (fleet_catalog.h): adverts -> last seen; published headers -> model_header.
#include "api/fleet_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace agentq::api {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A file name for any model name: its bytes in hex.
std::string hex_name(const std::string& name) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned char ch : name) {
    out += k[ch >> 4];
    out += k[ch & 15];
  }
  return out;
}

bool write_atomic(const fs::path& p, const std::string& data) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), std::streamsize(data.size()));
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  return !ec;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An advert's model entry's "kv_room" (worker.cpp); nullopt when absent (an older worker) or unusable.
std::optional<kv_room> parse_room(const json& m) {
  if (!m.contains("kv_room") || !m["kv_room"].is_object()) return std::nullopt;
  const json& r = m["kv_room"];
  auto num = [&](const char* k) -> int64_t {
    return r.contains(k) && r[k].is_number_integer() ? r[k].get<int64_t>() : -1;
  };
  const int64_t bs = num("block_size"), pages = num("pages"), window = num("window"), nw = num("layers_windowed");
  if (bs <= 0 || bs > (1 << 20) || pages <= 0 || window < 0 || window > (1 << 30) || nw < 0 || nw > (1 << 20))
    return std::nullopt;
  return kv_room{int32_t(bs), pages, int32_t(window), int32_t(nw)};
}

}  // namespace

fleet_catalog::fleet_catalog(const model_catalog& local, fleet_catalog_options options, fleet_source source)
    : local_(local), options_(std::move(options)), source_(std::move(source)) {
  // NOTE: a restart loses at most a twentieth of the TTL of a model's last-seen time (and at most a minute).
  options_.persist_every_ms = std::clamp<int64_t>(int64_t(options_.model_ttl_h * 3600000.0 / 20), 1000,
                                                  options_.persist_every_ms);
}

fleet_catalog::~fleet_catalog() { stop(); }

int64_t fleet_catalog::now_ms() const { return options_.clock ? options_.clock() : unix_ms(); }

bool fleet_catalog::fresh(const entry& e, int64_t now_ms) const { return fresh_ms(e.last_seen_ms, now_ms); }

bool fleet_catalog::fresh_ms(int64_t last_seen_ms, int64_t now_ms) const {
  return now_ms - last_seen_ms <= int64_t(options_.model_ttl_h * 3600000.0) + 2 * options_.poll_ms;
}

bool fleet_catalog::is_local(const std::string& name) const {
  for (const auto& m : local_.list())
    if (m.name == name) return true;
  return false;
}

void fleet_catalog::persist(const std::string& name, entry& e) {
  if (options_.cache_dir.empty()) return;
  std::error_code ec;
  fs::create_directories(options_.cache_dir, ec);
  const fs::path base = fs::path(options_.cache_dir) / hex_name(name);
  const size_t nl = e.version.find('\n');
  json meta = {{"name", name}, {"digest", e.version.substr(0, nl)},
               {"chat_family", nl == std::string::npos ? "" : e.version.substr(nl + 1)},
               {"last_seen_ms", e.last_seen_ms}, {"arch", e.arch}};
  // NOTE: the header first, then the metadata naming it: a crash between leaves the old pair usable.
  if (!fs::exists(base.string() + ".gguf-header", ec) || e.persisted_ms == 0)
    write_atomic(base.string() + ".gguf-header", e.header->bytes());
  if (write_atomic(base.string() + ".json", meta.dump())) e.persisted_ms = e.last_seen_ms;
}

void fleet_catalog::load_cache() {
  if (options_.cache_dir.empty()) return;
  const int64_t now_ms = this->now_ms();
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(options_.cache_dir, ec)) {
    if (de.path().extension() != ".json") continue;
    json meta = json::parse(read_all(de.path()), nullptr, false);
    if (!meta.is_object() || !meta.contains("name") || !meta["name"].is_string()) continue;
    const std::string name = meta["name"];
    entry e;
    e.last_seen_ms = meta.value("last_seen_ms", int64_t(0));
    e.persisted_ms = e.last_seen_ms;
    e.arch = meta.value("arch", std::string());
    e.version = meta.value("digest", std::string()) + "\n" + meta.value("chat_family", std::string());
    if (!fresh(e, now_ms)) continue;
    std::string err;
    fs::path hp = de.path();
    hp.replace_extension(".gguf-header");
    auto h = model_header::parse(read_all(hp), name, meta.value("chat_family", std::string()), &err);
    if (!h) {
      spdlog::warn("fleet model '{}': cached header unusable: {}", name, err);
      continue;
    }
    e.header = std::move(h);
    const int64_t age_s = (now_ms - e.last_seen_ms) / 1000;
    std::lock_guard lock(mu_);
    entries_[name] = std::move(e);
    spdlog::info("fleet model '{}' known from the cache (last seen {} s ago)", name, age_s);
  }
}

void fleet_catalog::poll_once() {
  const int64_t now_ms = this->now_ms();
  std::map<std::string, std::string> seen;  // name -> arch (advert)
  std::vector<std::tuple<std::string, std::string, kv_room>> rooms_seen;  // model, worker id, room
  for (const auto& text : source_.list_workers()) {
    json w = json::parse(text, nullptr, false);
    if (!w.is_object() || !w.contains("models") || !w["models"].is_array()) continue;
    const std::string worker_id = w.contains("id") && w["id"].is_string() ? w["id"].get<std::string>() : "";
    for (const auto& m : w["models"]) {
      if (!m.is_object() || !m.contains("name") || !m["name"].is_string()) continue;
      seen[m["name"].get<std::string>()] = m.value("arch", std::string());
      if (auto r = parse_room(m); r && !worker_id.empty()) rooms_seen.emplace_back(m["name"], worker_id, *r);
    }
  }
  {
    std::lock_guard lock(mu_);
    for (auto& [model, worker_id, room] : rooms_seen) rooms_[model][worker_id] = {room, now_ms};
    last_poll_ms_ = now_ms;
    for (auto mit = rooms_.begin(); mit != rooms_.end();) {
      for (auto it = mit->second.begin(); it != mit->second.end();)
        it = fresh_ms(it->second.last_seen_ms, now_ms) ? std::next(it) : mit->second.erase(it);
      mit = mit->second.empty() ? rooms_.erase(mit) : std::next(mit);
    }
  }
  for (const auto& [name, arch] : seen) {
    if (is_local(name)) continue;
    auto version = source_.header_version(name);
    if (!version) continue;  // Redis error: try next time
    std::string current;
    {
      std::lock_guard lock(mu_);
      if (auto it = entries_.find(name); it != entries_.end()) current = it->second.version;
    }
    std::shared_ptr<const model_header> header;
    if (version->empty() && current.empty()) {
      // NOTE: an older worker, or its header not yet written: known only once validation is possible.
      // (a worker publishes before its first advert; warn only when the header stays missing)
      const int64_t since = missing_since_.emplace(name, now_ms).first->second;
      if (now_ms - since > 10000 && now_ms - warned_ms_[name] > 600000) {
        spdlog::warn("fleet model '{}' is advertised but no worker published its header; jobs for it are "
                     "refused until one does (workers older than this control plane: upgrade them)", name);
        warned_ms_[name] = now_ms;
      }
      continue;
    }
    missing_since_.erase(name);
    if (!version->empty() && *version != current) {
      auto ph = source_.fetch_header(name);
      if (!ph) continue;
      std::string err;
      auto h = model_header::parse(ph->bytes, name, ph->chat_family, &err);
      if (!h) {
        if (now_ms - warned_ms_[name] > 600000) {
          spdlog::warn("fleet model '{}': its published header is unusable: {}", name, err);
          warned_ms_[name] = now_ms;
        }
        continue;
      }
      header = std::move(h);
      spdlog::info("fleet model '{}' ({}, n_ctx {}, chat family {}) known from a worker's advert", name,
                   header->model().arch, header->model().n_ctx, header->model().chat_family);
    }
    std::lock_guard lock(mu_);
    entry& e = entries_[name];
    if (header) {
      e.header = std::move(header);
      e.version = *version;
      e.persisted_ms = 0;  // a new header: written now
    }
    e.last_seen_ms = now_ms;
    e.arch = arch.empty() ? e.header->model().arch : arch;
    if (now_ms - e.persisted_ms >= options_.persist_every_ms) persist(name, e);
  }
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (fresh(it->second, now_ms)) {
      ++it;
      continue;
    }
    spdlog::info("fleet model '{}' forgotten: no live worker advertised it for {} h (--model-ttl-h)", it->first,
                 options_.model_ttl_h);
    std::error_code ec;
    if (!options_.cache_dir.empty()) {
      fs::remove(fs::path(options_.cache_dir) / (hex_name(it->first) + ".json"), ec);
      fs::remove(fs::path(options_.cache_dir) / (hex_name(it->first) + ".gguf-header"), ec);
    }
    it = entries_.erase(it);
  }
}

std::vector<model_info> fleet_catalog::list() const {
  std::vector<model_info> out = local_.list();
  std::set<std::string> names;
  for (const auto& m : out) names.insert(m.name);
  const int64_t now = now_ms();
  std::lock_guard lock(mu_);
  for (const auto& [name, e] : entries_) {
    if (names.count(name) || !fresh(e, now)) continue;
    model_info mi{name, e.arch, e.header->model().n_ctx, true, e.header->model().chat_family};
    mi.source = "fleet";
    mi.last_seen_ms = e.last_seen_ms;
    out.push_back(std::move(mi));
  }
  return out;
}

std::vector<kv_room> fleet_catalog::rooms(const std::string& model) const {
  std::vector<kv_room> live, known;
  const int64_t now = now_ms();
  std::lock_guard lock(mu_);
  if (auto it = rooms_.find(model); it != rooms_.end())
    for (const auto& [worker_id, r] : it->second) {
      if (!fresh_ms(r.last_seen_ms, now)) continue;
      known.push_back(r.room);
      if (r.last_seen_ms == last_poll_ms_) live.push_back(r.room);
    }
  return live.empty() ? known : live;
}

std::optional<std::string> fleet_catalog::validate(const std::string& model, const turn_request& request) const {
  // NOTE: every serving worker's room must hold the prompt, not just the largest: a job goes to
  // whichever worker serving its model claims it first (no routing by KV size), and one that a
  // smaller pool cannot hold would fail there; "a 400 at submit, or a job that can run". The live
  // workers' rooms when some serve the model, else those seen within the TTL (the job waits for
  // them); none known (older workers, none ever seen): not checked, the worker checks.
  const std::vector<kv_room> rs = rooms(model);
  if (is_local(model)) return local_.validate_with_rooms(model, request, rs);
  std::shared_ptr<const model_header> h;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(model);
    if (it == entries_.end() || !fresh(it->second, now_ms())) return "unknown model '" + model + "'";
    h = it->second.header;
  }
  return h->validate(request, rs);
}

void fleet_catalog::start() {
  load_cache();
  std::lock_guard lock(run_mu_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] {
    std::unique_lock lock(run_mu_);
    while (running_) {
      lock.unlock();
      try {
        poll_once();
      } catch (const std::exception& e) {
        spdlog::warn("fleet models: {}", e.what());
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [this] { return !running_; });
    }
  });
}

void fleet_catalog::stop() {
  {
    std::lock_guard lock(run_mu_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);  // the last-seen times as they are now, for the next start
  for (auto& [name, e] : entries_)
    if (e.last_seen_ms > e.persisted_ms) persist(name, e);
}

}  // namespace agentq::api
