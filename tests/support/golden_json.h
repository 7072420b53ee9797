// Greedy reference outputs (llama.cpp's, as JSON lines: prompt_ids, output_ids, top5_per_step)
// and the small JSON reader they need (the engine build has no JSON library).
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "agentq/engine.h"

namespace agentq::test {


struct json {
  enum class kind { null, boolean, number, string, array, object } k = kind::null;
  double num = 0;
  std::string str;
  std::vector<json> arr;
  std::map<std::string, json> obj;
  const json& operator[](const std::string& key) const {
    static const json none;
    auto it = obj.find(key);
    return it == obj.end() ? none : it->second;
  }
};

struct json_parser {
  const char* p;
  const char* end;
  void ws() { while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p; }
  [[noreturn]] void fail(const char* what) { throw std::runtime_error(std::string("golden json: ") + what); }
  void expect(char c) { ws(); if (p >= end || *p != c) fail("unexpected character"); ++p; }
  std::string string_lit() {
    expect('"');
    std::string s;
    while (p < end && *p != '"') {
      if (*p == '\\') {
        ++p;
        if (p >= end) fail("bad escape");
        char e = *p++;
        switch (e) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'r': s += '\r'; break;
          case 'b': s += '\b'; break;
          case 'f': s += '\f'; break;
          case 'u': {  // BMP only, enough for text we never compare
            if (end - p < 4) fail("bad \\u");
            unsigned cp = std::stoul(std::string(p, 4), nullptr, 16);
            p += 4;
            if (cp < 0x80) s += char(cp);
            else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 63)); }
            else { s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 63)); s += char(0x80 | (cp & 63)); }
            break;
          }
          default: s += e;
        }
      } else {
        s += *p++;
      }
    }
    if (p >= end) fail("unterminated string");
    ++p;
    return s;
  }
  json value() {
    ws();
    if (p >= end) fail("unexpected end");
    json v;
    if (*p == '{') {
      v.k = json::kind::object;
      ++p;
      ws();
      if (p < end && *p == '}') { ++p; return v; }
      for (;;) {
        std::string key = string_lit();
        expect(':');
        v.obj[key] = value();
        ws();
        if (p < end && *p == ',') { ++p; continue; }
        expect('}');
        return v;
      }
    }
    if (*p == '[') {
      v.k = json::kind::array;
      ++p;
      ws();
      if (p < end && *p == ']') { ++p; return v; }
      for (;;) {
        v.arr.push_back(value());
        ws();
        if (p < end && *p == ',') { ++p; continue; }
        expect(']');
        return v;
      }
    }
    if (*p == '"') { v.k = json::kind::string; v.str = string_lit(); return v; }
    if (end - p >= 4 && !std::strncmp(p, "true", 4)) { v.k = json::kind::boolean; v.num = 1; p += 4; return v; }
    if (end - p >= 5 && !std::strncmp(p, "false", 5)) { v.k = json::kind::boolean; p += 5; return v; }
    if (end - p >= 4 && !std::strncmp(p, "null", 4)) { p += 4; return v; }
    char* num_end = nullptr;
    std::string tmp(p, size_t(std::min<ptrdiff_t>(end - p, 64)));
    v.num = std::strtod(tmp.c_str(), &num_end);
    if (num_end == tmp.c_str()) fail("bad value");
    v.k = json::kind::number;
    p += num_end - tmp.c_str();
    return v;
  }
};

struct golden_case {
  std::string prompt;
  std::vector<token_id> prompt_ids, output_ids;
  std::vector<std::vector<std::pair<token_id, float>>> top5;  // [step][5] (id, logit)
};

inline std::vector<golden_case> load_golden(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open the golden file " + path.string());
  std::vector<golden_case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json_parser jp{line.data(), line.data() + line.size()};
    json j = jp.value();
    golden_case c;
    c.prompt = j["prompt"].str;
    for (const auto& x : j["prompt_ids"].arr) c.prompt_ids.push_back(token_id(x.num));
    for (const auto& x : j["output_ids"].arr) c.output_ids.push_back(token_id(x.num));
    for (const auto& step : j["top5_per_step"].arr) {
      std::vector<std::pair<token_id, float>> s;
      for (const auto& e : step.arr) s.emplace_back(token_id(e.arr.at(0).num), float(e.arr.at(1).num));
      c.top5.push_back(std::move(s));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}


}  // namespace agentq::test
