// Random JSON documents for tests of JSON writers (api/json_text.h): nested objects and arrays, keys
// and strings of quotes, backslashes, control characters, DEL and multi-byte UTF-8, integers at their
// limits, doubles of every magnitude and bit pattern.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace agentq::test {

using json = nlohmann::json;

inline std::string random_string(std::mt19937_64& rng) {
  static const std::string pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\r", "\b", "\f", std::string(1, '\0'),
                                       "\x01", "\x1f", "\x7f", "é", "€", "𝄞", "日本", "{}", "[", ":", ",", "\\u0041"};
  std::string s;
  for (int n = int(rng() % 12); n > 0; --n) s += pieces[rng() % std::size(pieces)];
  return s;
}

inline json random_value(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth < 4 ? 9 : 7)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return int64_t(rng()) >> (rng() % 64);
    case 3: return uint64_t(rng());
    case 4: {
      static const double fixed[] = {0.0, -0.0, 1.0, 0.1, 1e300, 1e-300, 5e-324, 123456789.125, -2.5,
                                     std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()};
      if (rng() % 2) return fixed[rng() % std::size(fixed)];
      double d;
      uint64_t bits = rng();
      std::memcpy(&d, &bits, sizeof d);
      return d;  // any bit pattern: NaN and infinities write null
    }
    case 5:
    case 6: return random_string(rng);
    case 7: {
      json a = json::array();
      for (int n = int(rng() % 5); n > 0; --n) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int n = int(rng() % 5); n > 0; --n) o[random_string(rng)] = random_value(rng, depth + 1);
      return o;
    }
  }
}


}  // namespace agentq::test
