// A purpose-built reader for the fixtures' ref_*.json shape: {"cases": [{"prompt": "...", "tokens":
// [ids], "greedy": [ids], ...}, ...]}. It takes each "prompt" string and the "tokens" (and "greedy")
// arrays that follow it; it is not a general JSON parser (the tests need no JSON dependency for
// this one file shape).
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "q35/io/utf8.hpp"

namespace q35::test {

struct ref_case {
  std::string prompt;
  std::vector<int32_t> tokens;
  std::vector<int32_t> greedy;  // llama.cpp's greedy continuation, when the file has one right after "tokens"
};

namespace detail {

inline void skip_ws(const std::string& s, size_t& p) {
  while (p < s.size() && (s[p] == ' ' || s[p] == '\n' || s[p] == '\r' || s[p] == '\t')) ++p;
}

inline uint32_t hex4(const std::string& s, size_t p) {
  if (p + 4 > s.size()) throw std::runtime_error("ref json: truncated \\u escape");
  return uint32_t(std::stoul(s.substr(p, 4), nullptr, 16));
}

// A JSON string starting at s[p] == '"'; leaves p after the closing quote.
inline std::string parse_string(const std::string& s, size_t& p) {
  if (p >= s.size() || s[p] != '"') throw std::runtime_error("ref json: expected a string");
  std::string out;
  for (++p; p < s.size() && s[p] != '"'; ++p) {
    if (s[p] != '\\') {
      out += s[p];
      continue;
    }
    switch (s[++p]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        uint32_t cp = hex4(s, p + 1);
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && s.compare(p + 1, 2, "\\u") == 0) {  // surrogate pair
          cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(s, p + 3) - 0xDC00);
          p += 6;
        }
        io::append_utf8(out, char32_t(cp));
        break;
      }
      default:
        out += s[p];  // \" \\ \/
    }
  }
  if (p >= s.size()) throw std::runtime_error("ref json: unterminated string");
  ++p;
  return out;
}

inline std::vector<int32_t> parse_int_array(const std::string& s, size_t& p) {
  if (p >= s.size() || s[p] != '[') throw std::runtime_error("ref json: expected an array");
  std::vector<int32_t> out;
  ++p;
  for (skip_ws(s, p); p < s.size() && s[p] != ']';) {
    size_t used = 0;
    out.push_back(int32_t(std::stol(s.substr(p, 16), &used)));
    p += used;
    skip_ws(s, p);
    if (s[p] == ',') ++p;
    skip_ws(s, p);
  }
  ++p;
  return out;
}

// Position just after `"key":` (and whitespace), searching from p; npos when absent.
inline size_t find_value(const std::string& s, const std::string& key, size_t p) {
  p = s.find("\"" + key + "\"", p);
  if (p == std::string::npos) return p;
  p = s.find(':', p) + 1;
  skip_ws(s, p);
  return p;
}

}  // namespace detail

inline std::vector<ref_case> read_ref_cases(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string s = buf.str();
  std::vector<ref_case> cases;
  for (size_t p = detail::find_value(s, "prompt", 0); p != std::string::npos; p = detail::find_value(s, "prompt", p)) {
    ref_case c;
    c.prompt = detail::parse_string(s, p);
    p = detail::find_value(s, "tokens", p);
    if (p == std::string::npos) throw std::runtime_error(path + ": a prompt without tokens");
    c.tokens = detail::parse_int_array(s, p);
    detail::skip_ws(s, p);
    if (p < s.size() && s[p] == ',') {
      ++p;
      detail::skip_ws(s, p);
      if (s.compare(p, 8, "\"greedy\"") == 0) {
        p = detail::find_value(s, "greedy", p);
        c.greedy = detail::parse_int_array(s, p);
      }
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace q35::test
