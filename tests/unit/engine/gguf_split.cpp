// Split GGUF (llama.cpp's gguf-split layout): the tiny model re-written as 3 files loads from
// the first and computes the same logits as the single file; a wrong or missing shard, a
// middle file opened first, or a lying split.* key is a clear error.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "temp_dir.h"
#include "test_env.h"

using namespace agentq;

namespace {

struct split_opts {
  int n_files = 3;
  int64_t lie_tensor_count = -1;  // >= 0: write this as split.tensors.count
  int wrong_no_in = -1;           // file index whose split.no is off by one
  int dup_tensor_in = -1;         // file index that repeats the first file's first tensor
};

// Writes src's metadata to the first file and its tensors round-robin over n_files files named
// <prefix>-0000i-of-0000N.gguf; returns the first file's path.
std::string write_split(const gguf::file& src, const std::string& prefix, const split_opts& o) {
  const auto& ts = src.tensors();
  std::string first;
  for (int i = 0; i < o.n_files; ++i) {
    gguf::writer w;
    if (i == 0)
      for (const auto& [k, v] : src.metadata()) w.set_value(k, v);
    w.set_u16("split.no", static_cast<uint16_t>(i == o.wrong_no_in ? i + 1 : i));
    w.set_u16("split.count", static_cast<uint16_t>(o.n_files));
    w.set_i32("split.tensors.count", static_cast<int32_t>(o.lie_tensor_count >= 0 ? o.lie_tensor_count : int64_t(ts.size())));
    std::vector<const gguf::tensor_info*> mine;
    for (size_t j = 0; j < ts.size(); ++j)
      if (int(j % size_t(o.n_files)) == i) mine.push_back(&ts[j]);
    if (i == o.dup_tensor_in) mine.push_back(&ts[0]);
    for (auto* t : mine) w.add_tensor(t->name, t->type, t->dims);
    char tail[64];
    std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", i + 1, o.n_files);
    const std::string path = prefix + tail;
    if (i == 0) first = path;
    std::string err;
    REQUIRE_MESSAGE(w.open(path, &err), err);
    for (auto* t : mine) REQUIRE_MESSAGE(w.write_tensor_data(t->data, t->n_bytes, &err), err);
    REQUIRE_MESSAGE(w.close(&err), err);
  }
  return first;
}

std::shared_ptr<const gguf::file> open_or_fail(const std::string& path) {
  std::string err;
  std::shared_ptr<const gguf::file> f = gguf::file::open(path, &err);
  REQUIRE_MESSAGE(f, err);
  return f;
}

std::vector<float> first_logits(std::shared_ptr<const gguf::file> f) {
  std::string err;
  auto m = model::load(std::move(f), 1, &err);
  REQUIRE_MESSAGE(m, err);
  kv_store kv(m->kv_layout_for(16), 2);
  const int32_t table[2] = {0, 1};
  const token_id prompt[5] = {1, 42, 7, 300, 12};
  batch_seq s;
  s.block_table = table;
  s.tokens = prompt;
  s.n_tokens = 5;
  std::vector<float> logits(size_t(m->hparams().n_vocab));
  REQUIRE(m->forward({&s, 1}, kv, logits.data()) == 1);
  return logits;
}

}  // namespace

TEST_CASE("a split model loads from its first file and computes what the single file does") {
  test::require_tiny_model();
  test::temp_dir dir;
  auto whole = open_or_fail(test::tiny_model().string());
  const std::string first = write_split(*whole, dir.file("tiny"), {});
  auto split = open_or_fail(first);
  CHECK(split->n_files() == 3);
  REQUIRE(split->tensors().size() == whole->tensors().size());
  for (const auto& t : whole->tensors()) {
    const gguf::tensor_info* s = split->find_tensor(t.name);
    REQUIRE_MESSAGE(s, t.name);
    CHECK(s->dims == t.dims);
    CHECK(std::memcmp(s->data, t.data, t.n_bytes) == 0);
  }
  CHECK(first_logits(split) == first_logits(whole));
}

TEST_CASE("split GGUF errors name the problem") {
  test::require_tiny_model();
  auto whole = open_or_fail(test::tiny_model().string());
  auto open_err = [](const std::string& path) {
    std::string err;
    auto f = gguf::file::open(path, &err);
    CHECK_FALSE(f);
    return err;
  };
  {
    test::temp_dir dir;
    write_split(*whole, dir.file("m"), {});
    const std::string err = open_err(dir.file("m-00002-of-00003.gguf"));
    CHECK_MESSAGE(err.find("open the first file") != std::string::npos, err);
    std::filesystem::remove(dir.file("m-00003-of-00003.gguf"));
    const std::string err3 = open_err(dir.file("m-00001-of-00003.gguf"));
    CHECK_MESSAGE(err3.find("file 3 of 3") != std::string::npos, err3);
    CHECK_MESSAGE(err3.find("m-00003-of-00003.gguf") != std::string::npos, err3);
  }
  {
    test::temp_dir dir;
    write_split(*whole, dir.file("m"), {.wrong_no_in = 2});
    const std::string err = open_err(dir.file("m-00001-of-00003.gguf"));
    CHECK_MESSAGE(err.find("does not say it is file 3 of 3") != std::string::npos, err);
  }
  {
    test::temp_dir dir;
    write_split(*whole, dir.file("m"), {.lie_tensor_count = 5});
    const std::string err = open_err(dir.file("m-00001-of-00003.gguf"));
    CHECK_MESSAGE(err.find("split.tensors.count says 5") != std::string::npos, err);
  }
  {
    test::temp_dir dir;
    write_split(*whole, dir.file("m"), {.dup_tensor_in = 1});
    const std::string err = open_err(dir.file("m-00001-of-00003.gguf"));
    CHECK_MESSAGE(err.find("appears in more than one file") != std::string::npos, err);
  }
  {
    test::temp_dir dir;
    const std::string first = write_split(*whole, dir.file("m"), {});
    std::filesystem::rename(first, dir.file("renamed.gguf"));
    const std::string err = open_err(dir.file("renamed.gguf"));
    CHECK_MESSAGE(err.find("must be named") != std::string::npos, err);
  }
}
