// Loads the gguf-py dequantization goldens of tests/data/quant (scripts/make_quant_goldens.py).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace q35::test {

struct quant_golden {
  std::vector<uint8_t> blocks;  // raw GGUF block bytes
  std::vector<float> values;    // gguf.quants.dequantize(blocks), float32
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline quant_golden load_quant_golden(const std::string& name) {
  const std::string dir = std::string(Q35_TEST_DATA_DIR) + "/quant/";
  quant_golden g;
  g.blocks = read_bytes(dir + name + ".blocks");
  const std::vector<uint8_t> v = read_bytes(dir + name + ".f32");
  g.values.resize(v.size() / 4);
  std::memcpy(g.values.data(), v.data(), g.values.size() * 4);
  return g;
}

// Bit-equal, except that any NaN equals any NaN (IEEE leaves NaN payloads of arithmetic open; GPUs
// return the canonical NaN where the host propagates the input's payload).
inline bool same_bits_or_both_nan(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace q35::test
