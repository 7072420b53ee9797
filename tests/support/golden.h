// The shared golden greedy outputs of the tiny model (../shared/golden/stories260K.greedy.jsonl):
// per line the prompt's token ids and llama.cpp's 128 greedy output ids.
#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "test_env.h"

namespace agentq::test {

struct golden {
  std::vector<token_id> prompt_ids, output_ids;
};

// The integer array after "key": in one JSON line (enough for the golden file; no JSON library).
inline std::vector<token_id> int_array_after(const std::string& line, const std::string& key) {
  std::vector<token_id> v;
  size_t p = line.find("\"" + key + "\"");
  p = line.find('[', p);
  const size_t e = line.find(']', p);
  std::stringstream ss(line.substr(p + 1, e - p - 1));
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(token_id(std::stoi(item)));
  return v;
}

inline std::vector<golden> load_golden() {
  std::vector<golden> g;
  std::ifstream f(shared_dir() / "golden" / "stories260K.greedy.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) g.push_back({int_array_after(line, "prompt_ids"), int_array_after(line, "output_ids")});
  return g;
}

}  // namespace agentq::test
