// The fixtures' ref_*.json test cases: {"cases": [{"prompt": "...", "tokens": [ids], "greedy":
// [ids], ...}, ...]}, read with nlohmann/json (Debian: nlohmann-json3-dev).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace q35::test {

struct ref_case {
  std::string prompt;
  std::vector<int32_t> tokens;
  std::vector<int32_t> greedy;  // llama.cpp's greedy continuation, when the case has one
};

// Every case of the file; a missing file, malformed JSON or a case without prompt/tokens throws.
inline std::vector<ref_case> read_ref_cases(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  try {
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::vector<ref_case> cases;
    for (const nlohmann::json& c : doc.at("cases")) {
      ref_case r;
      r.prompt = c.at("prompt").get<std::string>();
      r.tokens = c.at("tokens").get<std::vector<int32_t>>();
      if (c.contains("greedy")) r.greedy = c.at("greedy").get<std::vector<int32_t>>();
      cases.push_back(std::move(r));
    }
    return cases;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace q35::test
