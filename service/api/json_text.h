// JSON text written straight from values, byte for byte as nlohmann's dump(-1, ' ', false,
// replace) writes the document the same values would make (issue 29: the job object, the Batch
// output lines), and a usage JSON's fields read without building its document.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/validate.h"

namespace agentq::api {
namespace json_text {

using json = nlohmann::json;

// Appends JSON text as nlohmann's dump(-1, ' ', false, replace) writes the same values: no spaces,
// object keys in the order std::map keeps them (the callers write them sorted), doubles by
// nlohmann's own shortest round-trip conversion. unit.job_view compares job_json with
// job_object(...).dump() byte for byte.
class json_writer {
 public:
  explicit json_writer(std::string& out) : out_(out) {}
  void raw(std::string_view s) { out_.append(s); }
  // `"name":` for the fixed ASCII field names of the job object.
  void key(std::string_view name) {
    out_ += '"';
    out_.append(name);
    out_.append("\":");
  }
  void i64(int64_t v) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, v);
    out_.append(b, r.ptr);
  }
  void f64(double v) {
    if (!std::isfinite(v)) return raw("null");
    // NOTE: nlohmann's serializer formats a double with this function (detail namespace, but in its
    // public header); using it keeps the digits identical (unit.job_view checks that they are).
    char b[64];
    char* end = nlohmann::detail::to_chars(b, b + sizeof b, v);
    out_.append(b, end);
  }
  void seconds_or_null(int64_t ms) {
    if (ms > 0) f64(double(ms) / 1000.0);
    else raw("null");
  }
  void value(const json& j) { out_.append(j.dump(-1, ' ', false, json::error_handler_t::replace)); }
  // value() of a null, boolean, number or string, without the serializer
  void scalar(const json& j) {
    switch (j.type()) {
      case json::value_t::boolean: return raw(j.get<bool>() ? "true" : "false");
      case json::value_t::number_integer: return i64(j.get<int64_t>());
      case json::value_t::number_unsigned: {
        char b[24];
        auto r = std::to_chars(b, b + sizeof b, j.get<uint64_t>());
        return raw(std::string_view(b, size_t(r.ptr - b)));
      }
      case json::value_t::number_float: return f64(j.get<double>());
      case json::value_t::string: return str(j.get_ref<const std::string&>());
      case json::value_t::null: return raw("null");
      default: return value(j);
    }
  }
  // A JSON string: valid UTF-8 is copied but for '"', '\\' and the control characters, escaped as
  // nlohmann's dump_escaped escapes them with ensure_ascii off.
  void str(std::string_view s) {
    // NOTE: invalid UTF-8 (a model's cut multi-byte character) goes through nlohmann itself: its
    // replacement rules (where U+FFFD goes, which bytes it eats) are its own; rare, so one copy.
    if (!is_valid_utf8(s)) return value(json(std::string(s)));
    out_ += '"';
    size_t run = 0;  // start of the bytes not yet copied
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_.append(s.substr(run, i - run));
      run = i + 1;
      switch (c) {
        case '"': out_.append("\\\""); break;
        case '\\': out_.append("\\\\"); break;
        case '\b': out_.append("\\b"); break;
        case '\t': out_.append("\\t"); break;
        case '\n': out_.append("\\n"); break;
        case '\f': out_.append("\\f"); break;
        case '\r': out_.append("\\r"); break;
        default: {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
          out_.append(b, 6);
        }
      }
    }
    out_.append(s.substr(run));
    out_ += '"';
  }
  // Any value, containers walked here and their scalars as scalar() writes them.
  // NOTE: nlohmann's serializer runs every string byte through its UTF-8 state machine: a mapped
  // Batch line's spec took 1.21 us to dump of the mapper's ~8 us a line, 0.66 us written here (issue 29).
  void document(const json& j) {
    if (j.is_object()) {
      out_ += '{';
      bool first = true;
      for (const auto& [k, v] : j.get_ref<const json::object_t&>()) {
        if (!first) out_ += ',';
        first = false;
        str(k);
        out_ += ':';
        document(v);
      }
      out_ += '}';
    } else if (j.is_array()) {
      out_ += '[';
      bool first = true;
      for (const auto& v : j.get_ref<const json::array_t&>()) {
        if (!first) out_ += ',';
        first = false;
        document(v);
      }
      out_ += ']';
    } else {
      scalar(j);
    }
  }

 private:
  std::string& out_;
};

// The fields of a usage JSON that job_object shows (usage_object's counts, n_turns, a turn's finish
// and timings), read by one SAX pass over the text: no document is built (two or three documents
// per GET were most of its allocations, issue 29). A field holds the last value of its key at the top
// level, as the parsed object would ("discarded" = absent); an object or array there reads as null
// (not a number, not a string: what first_int and the finish check make of it). complex(): a
// value job_object would copy whole (an object in "queue_ms") or throw on ("turns": "x"); the caller
// then makes the object the old way. Text that does not parse, or a top level that is not an
// object, reads as {} (parse_or's fallback).
class usage_reader : public json::json_sax_t {
 public:
  explicit usage_reader(const std::string& text) {
    if (!text.empty() && (!json::sax_parse(text, this) || !root_is_object_)) *this = usage_reader();
  }
  usage_reader() = default;

  bool complex() const { return complex_; }
  int64_t prompt() const { return first_number(prompt_tokens_, n_tokens_prompt_); }
  int64_t cached() const { return first_number(cached_tokens_, n_tokens_cached_); }
  int64_t completion() const { return first_number(completion_tokens_, n_tokens_generated_); }
  int64_t accepted() const { return first_number(accepted_, accepted_); }
  int64_t rejected() const { return first_number(rejected_, rejected_); }
  // value("turns", 0): a number or boolean converted as get<int>() converts it
  int n_turns() const { return turns_.is_discarded() ? 0 : turns_.get<int>(); }
  const json& finish() const { return finish_; }
  // decode_ms, prefill_ms, queue_ms (sorted, as the object keeps them); discarded = absent
  std::array<std::pair<const char*, const json*>, 3> timings() const {
    return {{{"decode_ms", &decode_ms_}, {"prefill_ms", &prefill_ms_}, {"queue_ms", &queue_ms_}}};
  }

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool string(string_t& v) override {
    // kept where it is shown (finish, a timing); elsewhere only "not a number" matters
    return scalar(field_ == &finish_ || copied_whole(field_) ? json(v) : json(nullptr));
  }
  bool binary(binary_t&) override { return scalar(json(nullptr)); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    field_ = nullptr;
    if (depth_ == 1 && root_is_object_) {
      details_key_ = k == "completion_tokens_details";
      for (auto& [name, f] : top_fields())
        if (k == name) field_ = &(this->*f);
    } else if (depth_ == 2 && in_details_) {
      if (k == "accepted_prediction_tokens") field_ = &accepted_;
      else if (k == "rejected_prediction_tokens") field_ = &rejected_;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  using member = json usage_reader::*;
  static const std::array<std::pair<const char*, member>, 11>& top_fields() {
    static const std::array<std::pair<const char*, member>, 11> k_fields = {{
        {"prompt_tokens", &usage_reader::prompt_tokens_}, {"n_tokens_prompt", &usage_reader::n_tokens_prompt_},
        {"cached_tokens", &usage_reader::cached_tokens_}, {"n_tokens_cached", &usage_reader::n_tokens_cached_},
        {"completion_tokens", &usage_reader::completion_tokens_},
        {"n_tokens_generated", &usage_reader::n_tokens_generated_}, {"turns", &usage_reader::turns_},
        {"finish", &usage_reader::finish_}, {"queue_ms", &usage_reader::queue_ms_},
        {"prefill_ms", &usage_reader::prefill_ms_}, {"decode_ms", &usage_reader::decode_ms_}}};
    return k_fields;
  }
  static int64_t first_number(const json& a, const json& b) {
    if (a.is_number()) return a.get<int64_t>();
    if (b.is_number()) return b.get<int64_t>();
    return 0;
  }
  bool copied_whole(const json* f) const { return f == &queue_ms_ || f == &prefill_ms_ || f == &decode_ms_; }
  // A value of the current key (at the top level or in the details object).
  bool scalar(json v) {
    if (depth_ == 1 && root_is_object_ && details_key_) in_details_ = false, reset_details();
    if (field_ == &turns_ && !v.is_number() && !v.is_boolean()) complex_ = true;
    if (field_) *field_ = std::move(v);
    field_ = nullptr;
    return true;
  }
  bool open(bool is_object) {
    if (depth_ == 0) root_is_object_ = is_object;
    if (depth_ == 1 && root_is_object_) {
      if (details_key_) {
        reset_details();
        in_details_ = is_object;
      }
      if (field_ == &turns_ || copied_whole(field_)) complex_ = true;
      if (field_) *field_ = json(nullptr);
    } else if (depth_ == 2 && in_details_ && field_) {
      *field_ = json(nullptr);
    }
    field_ = nullptr;
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    if (depth_ == 1) in_details_ = false;
    return true;
  }
  static json absent() { return json(json::value_t::discarded); }
  void reset_details() { accepted_ = rejected_ = absent(); }

  int32_t depth_ = 0;          // open objects and arrays
  bool root_is_object_ = false;
  bool details_key_ = false;   // the current top-level key is "completion_tokens_details"
  bool in_details_ = false;    // inside that key's object
  bool complex_ = false;
  json* field_ = nullptr;      // where the current key's value goes; nullptr = not read
  // NOTE: = json(...), not json{...}: braces would make a one-element array.
  json prompt_tokens_ = absent(), n_tokens_prompt_ = absent(), cached_tokens_ = absent(), n_tokens_cached_ = absent();
  json completion_tokens_ = absent(), n_tokens_generated_ = absent(), accepted_ = absent(), rejected_ = absent();
  json turns_ = absent(), finish_ = absent(), queue_ms_ = absent(), prefill_ms_ = absent(), decode_ms_ = absent();
};

// usage_object's object, from the fields a usage_reader read.
inline void write_usage(json_writer& w, const usage_reader& u) {
  const int64_t prompt = u.prompt(), completion = u.completion();
  w.raw("{");
  w.key("cached_tokens"), w.i64(u.cached());
  w.raw(","), w.key("completion_tokens"), w.i64(completion);
  w.raw(","), w.key("completion_tokens_details");
  w.raw("{"), w.key("accepted_prediction_tokens"), w.i64(u.accepted());
  w.raw(","), w.key("rejected_prediction_tokens"), w.i64(u.rejected()), w.raw("}");
  w.raw(","), w.key("prompt_tokens"), w.i64(prompt);
  w.raw(","), w.key("total_tokens"), w.i64(prompt + completion);
  w.raw("}");
}

// j's text, byte for byte as j.dump(-1, ' ', false, replace) (for text that came from a parse, as
// plain dump(): its strings are valid UTF-8).
inline std::string document_text(const json& j) {
  std::string out;
  json_writer(out).document(j);
  return out;
}

}  // namespace json_text

using json_text::document_text;
using json_text::json_writer;
using json_text::usage_reader;
using json_text::write_usage;

}  // namespace agentq::api
