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
