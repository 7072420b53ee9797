// A Batch input file's mapped lines, kept beside it (<file>.specs) by the upload that checked them,
// so a batch's acceptance reads each line's job spec instead of parsing and mapping the line again
// (docs/queue_perf.md "Session 38": ~0.55 of an acceptance's ~1.7 CPU-s per 100,000 lines).
// NOTE: a cache, never the truth: the acceptance takes a record only when it is whole, was written
// by this process (a restart may change limits, guard or models: its records are not used), names
// a model the catalog still lists as it did, and hashes to the very line it reads; any other line is
// mapped from its text as before, with the same result.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/model_catalog.h"

namespace agentq::api {

// A model as a record names it: every catalog field the mapping reads.
std::string model_signature(const model_info& m);

// One request line as its acceptance would map it: request_json is the spec with its "batch" object,
// whose "id" (the batch id, unknown at upload) goes at id_at.
struct mapped_line {
  uint64_t line_hash = 0;  // FNV-1a of the line's text (no newline, no '\r')
  std::string custom_id;
  bool store_content = true;
  std::string model;  // model_signature of the model the line names
  std::string request_json;
  uint32_t id_at = 0;
};

uint64_t line_hash(std::string_view line);

// The mapped_line of a line (its hash) whose spec batch_line_spec made: the spec's text as document_text
// writes it once acceptance has added the batch object ({"custom_id", "id"}); nullopt when the spec
// names no model the catalog lists (acceptance maps such a line itself).
std::optional<mapped_line> map_for_sidecar(std::string_view line, const nlohmann::json& spec, const std::string& custom_id,
                                           bool store_content, const std::vector<model_info>& models);

// Removes a stored file (rel: its path under files_dir) and its sidecar, if any; true when the file
// itself was there. Every deletion of a file goes through it (a sidecar never outlives its file).
bool remove_batch_file(const std::string& files_dir, const std::string& rel);

// request_json with the batch id spliced in: what acceptance stores for the line.
std::string spliced_request(const mapped_line& m, std::string_view batch_id);

// Appends records (in line order) to <path>.part; commit() renames it to path. Failures make it
// inert (the acceptance then maps every line); the destructor removes an uncommitted part.
class specs_writer {
 public:
  explicit specs_writer(std::string path);
  ~specs_writer();
  // A line's record bytes (made on any thread); nullopt: a line without one (acceptance maps it).
  static std::string record(const std::optional<mapped_line>& m);
  void append(std::string_view record);
  bool commit();

 private:
  std::string path_;
  FILE* f_ = nullptr;
  std::string buf_;
  void flush();
};

// Reads the records in order. Returns nullptr when the file is absent or not this process's.
class specs_reader {
 public:
  static std::unique_ptr<specs_reader> open(const std::string& path);
  ~specs_reader();
  // The next line's record (nullopt: none for it, or the file ended or is damaged: then every later
  // call is nullopt too).
  std::optional<mapped_line> next();

 private:
  explicit specs_reader(FILE* f) : f_(f) {}
  FILE* f_ = nullptr;
  bool broken_ = false;
};

}  // namespace agentq::api
