// fleet_catalog (#28) over the tiny model's real header: a model only workers advertise becomes
// known once its header is published, validates like a local model with the same file, survives
// a restart through its cache, follows a changed header, is forgotten past the TTL, and never
// shadows a local model of the same name; an advert without a header stays unknown.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "api/fleet_catalog.h"
#include "temp_dir.h"
#include "test_env.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

struct fleet {
  std::vector<std::string> adverts;                            // live workers' adverts
  std::map<std::string, queue::published_header> headers;      // what Redis holds
  int n_fetches = 0;
  api::fleet_source source() {
    api::fleet_source s;
    s.list_workers = [this] { return adverts; };
    s.header_version = [this](const std::string& m) -> std::optional<std::string> {
      auto it = headers.find(m);
      return it == headers.end() ? std::string() : it->second.digest + "\n" + it->second.chat_family;
    };
    s.fetch_header = [this](const std::string& m) -> std::optional<queue::published_header> {
      ++n_fetches;
      auto it = headers.find(m);
      if (it == headers.end()) return std::nullopt;
      return it->second;
    };
    return s;
  }
  void advertise(const std::vector<std::string>& models) {
    json ms = json::array();
    for (const auto& m : models) ms.push_back({{"name", m}, {"arch", "llama"}});
    adverts = {json{{"id", "w"}, {"models", ms}}.dump()};
  }
};

std::shared_ptr<model_header> tiny(const std::string& family = "") {
  std::string err;
  auto h = model_header::open(test::tiny_model().string(), family, &err);
  REQUIRE_MESSAGE(h, err);
  return std::shared_ptr<model_header>(std::move(h));
}

turn_request long_prompt() {
  turn_request r;
  std::string t;
  for (int i = 0; i < 2000; ++i) t += "Once upon a time ";
  r.messages.push_back({role::user, t, {}, {}, {}});
  return r;
}

bool listed(const api::model_catalog& c, const std::string& name, std::string* source = nullptr) {
  for (const auto& m : c.list())
    if (m.name == name) {
      if (source) *source = m.source;
      return true;
    }
  return false;
}

}  // namespace

TEST_CASE("fleet_catalog: known from adverts with a published header, for the TTL, across restarts") {
  test::temp_dir dir;
  api::header_catalog local;
  local.add(tiny());  // "stories260K", local
  fleet f;
  int64_t now = 1'700'000'000'000;
  const int64_t hour = 3'600'000;
  api::fleet_catalog_options o;
  o.model_ttl_h = 1;
  o.cache_dir = dir.file("fleet");
  o.clock = [&now] { return now; };
  auto h = tiny("chatml");

  api::fleet_catalog c(local, o, f.source());
  f.advertise({"beta"});
  c.poll_once();
  CHECK_FALSE(listed(c, "beta"));  // advertised, but no header: cannot validate, so unknown
  CHECK(c.validate("beta", long_prompt()) == "unknown model 'beta'");

  f.headers["beta"] = {h->model().digest, "chatml", h->bytes()};
  now += 1000;
  c.poll_once();
  std::string source;
  REQUIRE(listed(c, "beta", &source));
  CHECK(source == "fleet");
  CHECK(c.validate("beta", long_prompt()) == h->validate(long_prompt()));
  CHECK(c.validate("beta", long_prompt())->find("the model's context is") != std::string::npos);
  for (const auto& m : c.list())
    if (m.name == "beta") CHECK(m.chat_family == "chatml");
  const int n = f.n_fetches;
  now += 1000;
  c.poll_once();
  CHECK(f.n_fetches == n);  // same digest: not fetched again

  // a local model of the same name wins
  f.advertise({"beta", "stories260K"});
  f.headers["stories260K"] = {h->model().digest, "chatml", h->bytes()};
  now += 1000;
  c.poll_once();
  REQUIRE(listed(c, "stories260K", &source));
  CHECK(source == "local");
  int n_tiny = 0;
  for (const auto& m : c.list()) n_tiny += m.name == "stories260K";
  CHECK(n_tiny == 1);
  const int64_t last_seen = now;

  // no worker any more: known until the TTL, also after a restart (the cache)
  f.adverts.clear();
  now = last_seen + hour / 2;
  c.poll_once();
  CHECK(listed(c, "beta"));
  c.stop();
  {
    api::fleet_catalog c2(local, o, f.source());
    c2.load_cache();
    REQUIRE(listed(c2, "beta"));
    CHECK(c2.validate("beta", long_prompt()) == h->validate(long_prompt()));
    for (const auto& m : c2.list())
      if (m.name == "beta") CHECK(m.last_seen_ms == last_seen);
    now = last_seen + hour + 10'000;  // past the TTL
    CHECK_FALSE(listed(c2, "beta"));
    c2.poll_once();  // forgets it, and its cache files
  }
  CHECK(c.validate("beta", long_prompt()) == "unknown model 'beta'");
  now = last_seen + hour / 2;
  api::fleet_catalog c3(local, o, f.source());
  c3.load_cache();
  CHECK_FALSE(listed(c3, "beta"));
}

TEST_CASE("fleet_catalog: a changed header is fetched again; a broken one is refused") {
  api::header_catalog local;
  fleet f;
  int64_t now = 1'700'000'000'000;
  api::fleet_catalog_options o;
  o.clock = [&now] { return now; };
  api::fleet_catalog c(local, o, f.source());
  auto plain = tiny(), chatml = tiny("chatml");
  f.advertise({"m"});
  f.headers["m"] = {plain->model().digest, "", plain->bytes()};
  c.poll_once();
  REQUIRE(listed(c, "m"));
  CHECK(c.list()[0].chat_family == "plain");
  f.headers["m"] = {chatml->model().digest, "chatml", chatml->bytes()};  // same file, another family
  now += 1000;
  c.poll_once();
  CHECK(c.list()[0].chat_family == "chatml");
  f.advertise({"m", "broken"});
  f.headers["broken"] = {"x", "", "GGUF garbage"};
  now += 1000;
  c.poll_once();
  CHECK_FALSE(listed(c, "broken"));
}

namespace {

// The tiny model in a real engine with a pool of kv_budget_bytes in 16-token blocks.
std::shared_ptr<engine> tiny_engine(uint64_t kv_budget_bytes) {
  engine_config c;
  c.model_path = test::tiny_model().string();
  c.n_threads = 1;
  c.block_size = 16;
  c.kv_budget_bytes = kv_budget_bytes;
  c.chat_family = "chatml";
  std::string err;
  auto e = engine::load(c, &err);
  REQUIRE_MESSAGE(e, err);
  return std::shared_ptr<engine>(std::move(e));
}

json room_json(const kv_room& r, int32_t n_layer) {
  return {{"layers", n_layer}, {"block_size", r.block_size}, {"pages", r.n_pages}, {"window", r.window},
          {"layers_windowed", r.n_layer_windowed}};
}

turn_request words(int n) {
  turn_request r;
  std::string t;
  for (int i = 0; i < n; ++i) t += "dog ";
  r.messages.push_back({role::user, t, {}, {}, {}});
  return r;
}

}  // namespace

TEST_CASE("fleet_catalog: the KV-room check at submit answers as the worker's engine would (#28)") {
  test::require_tiny_model();
  auto one = tiny_engine(1);  // the smallest pool: one block
  const model_desc& d = one->model();
  REQUIRE(d.kv.n_pages == d.n_layer);  // one block, every layer
  const uint64_t token_bytes = 2ull * d.n_layer * d.n_head_kv * (d.n_embd / d.n_head) * 2;  // K and V, f16
  auto small = tiny_engine(256 * token_bytes);  // 16 blocks: 256 tokens, within the context (512)
  auto large = tiny_engine(8 << 20);            // more than the context
  REQUIRE(small->model().kv_capacity_tokens == 256);
  const int32_t n_layer = d.n_layer;
  api::header_catalog local;
  local.add(tiny("chatml"));  // stories260K: the control plane's own header
  fleet f;
  auto h = tiny("chatml");
  f.headers["beta"] = {h->model().digest, "chatml", h->bytes()};
  int64_t now = 1'700'000'000'000;
  api::fleet_catalog_options o;
  o.model_ttl_h = 1;
  o.clock = [&now] { return now; };
  api::fleet_catalog c(local, o, f.source());
  auto advertise = [&](std::vector<std::pair<std::string, const engine*>> workers) {
    f.adverts.clear();
    for (auto& [id, e] : workers) {
      json ms = json::array();
      for (const char* m : {"beta", "stories260K"})
        ms.push_back({{"name", m}, {"arch", "llama"}, {"kv_room", room_json(e->model().kv, n_layer)}});
      f.adverts.push_back(json{{"id", id}, {"models", ms}}.dump());
    }
    now += 1000;
    c.poll_once();
  };

  // No worker has advertised a room yet: not checked (the worker would check).
  advertise({});
  CHECK_FALSE(c.validate("stories260K", words(150)));  // past the small pool (below), not checked
  // One small worker: exactly the engine's answers, message included, for a fleet model and for
  // the control plane's own header.
  advertise({{"ws", small.get()}});
  int n_refused = 0, n_accepted = 0, n_kv = 0;  // n_kv: words past the small pool, within the context
  for (int n = 1; n <= 300; n += 3) {
    const auto want = small->validate(words(n));
    CHECK(c.validate("beta", words(n)) == want);
    CHECK(c.validate("stories260K", words(n)) == want);
    (want ? n_refused : n_accepted)++;
    if (want && !large->validate(words(n)) && n_kv == 0) n_kv = n;
  }
  CHECK(n_accepted > 0);
  REQUIRE(n_kv > 0);
  const auto refused = small->validate(words(n_kv));
  REQUIRE(refused);
  CHECK(refused->find("needs more KV memory than the engine has") != std::string::npos);
  // A larger worker beside it: still refused (the small one could claim the job).
  advertise({{"ws", small.get()}, {"wl", large.get()}});
  CHECK(c.validate("beta", words(n_kv)) == refused);
  // Only the larger one live: accepted. With none live, the rooms seen within the TTL decide
  // (the job would wait for one of them): the small one's among them.
  advertise({{"wl", large.get()}});
  CHECK_FALSE(c.validate("beta", words(n_kv)));
  advertise({});
  CHECK(c.validate("beta", words(n_kv)) == refused);
  CHECK(c.rooms("beta").size() == 2);  // both within the TTL, neither live
  // An advert without kv_room (an older worker) adds no room; garbage is ignored.
  f.adverts = {json{{"id", "old"}, {"models", json::array({{{"name", "beta"}}})}}.dump(),
               json{{"id", "bad"}, {"models", json::array({{{"name", "beta"}, {"kv_room", {{"pages", -1}}}}})}}.dump()};
  now += 1000;
  c.poll_once();
  CHECK(c.rooms("beta").size() == 2);
}
