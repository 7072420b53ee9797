// Split GGUF models (llama.cpp's gguf-split: <prefix>-00001-of-0000N.gguf, each file with
// split.no / split.count): opened from the first file, the other shards' tensors merged in.
#include <cstdio>
#include <string>

#include "gguf/reader.h"

namespace agentq::gguf {

namespace {

// "<prefix>-%05d-of-%05d.gguf" for shard no (0-based) of count, as llama_split_path.
std::string shard_path(const std::string& prefix, int64_t no, int64_t count) {
  char tail[64];
  std::snprintf(tail, sizeof(tail), "-%05lld-of-%05lld.gguf", static_cast<long long>(no + 1),
                static_cast<long long>(count));
  return prefix + tail;
}

}  // namespace

std::unique_ptr<file> file::open(const std::string& path, std::string* error) {
  std::unique_ptr<file> f = open_one(path, error);
  if (!f) return nullptr;
  if (!f->open_shards(error)) return nullptr;
  return f;
}

bool file::open_shards(std::string* error) {
  const value* count_v = find("split.count");
  if (!count_v) return true;
  auto fail = [&](const std::string& why) {
    if (error) *error = "split GGUF '" + path_ + "': " + why;
    return false;
  };
  const std::optional<int64_t> count = get_int("split.count"), no = get_int("split.no");
  if (!count || *count < 1 || *count > 9999) return fail("split.count must be an integer in 1..9999");
  if (*count == 1) return true;
  if (!no) return fail("split.count is set but split.no is missing");
  if (*no != 0)
    return fail("this is file " + std::to_string(*no + 1) + " of " + std::to_string(*count) +
                "; open the first file of the split (-00001-of-" + std::to_string(*count) + ".gguf)");
  const std::string first_tail = shard_path("", 0, *count);
  if (path_.size() <= first_tail.size() || path_.compare(path_.size() - first_tail.size(), first_tail.size(), first_tail) != 0)
    return fail("a split model's first file must be named <prefix>" + first_tail + " so its other files can be found");
  const std::string prefix = path_.substr(0, path_.size() - first_tail.size());
  for (int64_t i = 1; i < *count; ++i) {
    const std::string p = shard_path(prefix, i, *count);
    std::string err;
    std::unique_ptr<file> s = open_one(p, &err);
    if (!s) return fail("file " + std::to_string(i + 1) + " of " + std::to_string(*count) + ": " + err);
    if (s->get_int("split.count") != count || s->get_int("split.no") != i)
      return fail("'" + p + "' does not say it is file " + std::to_string(i + 1) + " of " + std::to_string(*count) +
                  " (split.no / split.count)");
    for (auto& t : s->tensors_) {
      if (tensor_index_.count(t.name)) return fail("tensor '" + t.name + "' appears in more than one file");
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(t);  // data points into the shard's mapping, which shards_ keeps
    }
    shards_.push_back(std::move(s));
  }
  if (const auto n = get_int("split.tensors.count"); n && *n != static_cast<int64_t>(tensors_.size()))
    return fail("split.tensors.count says " + std::to_string(*n) + " tensors, the files hold " +
                std::to_string(tensors_.size()));
  return true;
}

}  // namespace agentq::gguf
