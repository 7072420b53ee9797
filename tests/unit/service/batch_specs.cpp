// A Batch input file's sidecar of mapped lines (api/batch_specs.h): a record's text with the batch id
// spliced in is byte for byte what acceptance writes for the line (the spec with its batch object,
// as document_text writes it), records read back as written, and a sidecar cut short, damaged or
// written by another process yields no record past the damage.
#include "api/batch_specs.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "api/json_text.h"
#include "random_json.h"
#include "temp_dir.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

const std::vector<api::model_info> k_models = {{"tiny", "llama", 64, true}, {"other", "llama", 128, true}};

}  // namespace

TEST_CASE("batch specs: a record with the batch id spliced in is acceptance's text for the line") {
  std::mt19937_64 rng(29);
  // Keys that sort before, at and after "batch", and a spec that already has one (acceptance's
  // assignment replaces it).
  const char* keys[] = {"a", "bat", "batch", "batch0", "batcg", "messages", "model", "zz", "\xc3\xa9", "B"};
  const char* ids[] = {"plain", "q\"uote", "caf\xc3\xa9", "", "ctl\x02", "r"};
  int n = 0;
  for (int round = 0; round < 2000; ++round) {
    json spec = json::object();
    spec["model"] = rng() % 2 ? "tiny" : "other";
    for (int i = int(rng() % 6); i > 0; --i) {
      const char* k = keys[rng() % std::size(keys)];
      if (std::string(k) != "model") spec[k] = test::random_value(rng, 0);
    }
    const std::string custom_id = std::string(ids[rng() % std::size(ids)]) + std::to_string(round);
    const bool store = rng() % 2 == 0;
    const std::string line = "line " + std::to_string(round);
    auto m = api::map_for_sidecar(line, spec, custom_id, store, k_models);
    REQUIRE(m);
    CHECK(m->custom_id == custom_id);
    CHECK(m->store_content == store);
    CHECK(m->line_hash == api::line_hash(line));
    CHECK(m->model == api::model_signature(k_models[spec["model"] == "tiny" ? 0 : 1]));
    const std::string batch_id = "batch_" + std::to_string(rng());
    json want = spec;
    want["batch"] = {{"id", batch_id}, {"custom_id", custom_id}};
    REQUIRE(api::spliced_request(*m, batch_id) == api::document_text(want));
    ++n;
  }
  CHECK(n == 2000);
  // A model the catalog does not list, or none: no record (acceptance maps the line).
  CHECK_FALSE(api::map_for_sidecar("x", json{{"model", "gone"}}, "c", true, k_models));
  CHECK_FALSE(api::map_for_sidecar("x", json{{"messages", json::array()}}, "c", true, k_models));
  CHECK_FALSE(api::map_for_sidecar("x", json::array(), "c", true, k_models));
  CHECK(api::line_hash("a") != api::line_hash("b"));
}

TEST_CASE("batch specs: records read back in order; cut short, damaged or foreign files give no more") {
  test::temp_dir dir;
  const std::string path = dir.file("f.jsonl.specs");
  std::vector<std::optional<api::mapped_line>> written;
  for (int i = 0; i < 50; ++i) {
    if (i % 7 == 3) {
      written.push_back(std::nullopt);  // a line without a record
      continue;
    }
    written.push_back(api::map_for_sidecar("line" + std::to_string(i),
                                           json{{"model", "tiny"}, {"messages", std::string(size_t(i) * 100, 'x')}},
                                           "c" + std::to_string(i), i % 2 == 0, k_models));
  }
  {
    api::specs_writer w(path);
    for (const auto& m : written) w.append(api::specs_writer::record(m));
    CHECK_FALSE(std::filesystem::exists(path));  // until committed
    REQUIRE(w.commit());
  }
  REQUIRE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".part"));
  auto read_all = [&](const std::string& p, size_t n) {
    std::vector<std::optional<api::mapped_line>> out;
    auto r = api::specs_reader::open(p);
    if (!r) return out;
    for (size_t i = 0; i < n; ++i) out.push_back(r->next());
    return out;
  };
  auto same = [](const std::optional<api::mapped_line>& a, const std::optional<api::mapped_line>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->line_hash == b->line_hash && a->custom_id == b->custom_id &&
                  a->store_content == b->store_content && a->model == b->model &&
                  a->request_json == b->request_json && a->id_at == b->id_at);
  };
  auto all = read_all(path, written.size() + 3);
  REQUIRE(all.size() == written.size() + 3);
  for (size_t i = 0; i < written.size(); ++i) CHECK(same(all[i], written[i]));
  for (size_t i = written.size(); i < all.size(); ++i) CHECK_FALSE(all[i]);  // past the end

  const auto size = std::filesystem::file_size(path);
  std::string bytes(size, '\0');
  std::ifstream(path, std::ios::binary).read(bytes.data(), std::streamsize(size));
  // Cut short anywhere: the whole records before the cut, then nothing.
  for (size_t cut : {size_t(30), size / 3, size / 2, size - 1}) {
    CAPTURE(cut);
    const std::string p = dir.file("cut.specs");
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(cut));
    auto got = read_all(p, written.size());
    bool ended = false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!ended && got[i] && !same(got[i], written[i])) FAIL("a record read differs from the one written");
      if (written[i] && !got[i]) ended = true;
      if (ended) CHECK_FALSE(got[i]);
    }
  }
  // A damaged record kind or length: nothing from there on.
  {
    std::string bad = bytes;
    bad[24] = char(7);  // the first record's kind
    const std::string p = dir.file("bad.specs");
    std::ofstream(p, std::ios::binary).write(bad.data(), std::streamsize(bad.size()));
    for (const auto& m : read_all(p, written.size())) CHECK_FALSE(m);
  }
  // Another process's sidecar (its nonce), or not a sidecar: not opened.
  {
    std::string other = bytes;
    other[8] = char(other[8] ^ 0x5a);
    const std::string p = dir.file("other.specs");
    std::ofstream(p, std::ios::binary).write(other.data(), std::streamsize(other.size()));
    CHECK_FALSE(api::specs_reader::open(p));
    std::ofstream(p, std::ios::binary) << "{\"not\":\"a sidecar\"}\n";
    CHECK_FALSE(api::specs_reader::open(p));
    CHECK_FALSE(api::specs_reader::open(dir.file("missing.specs")));
  }
  // An uncommitted writer leaves nothing behind.
  {
    api::specs_writer w(dir.file("gone.specs"));
    w.append(api::specs_writer::record(written[0]));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("gone.specs")));
  CHECK_FALSE(std::filesystem::exists(dir.file("gone.specs") + ".part"));
}
