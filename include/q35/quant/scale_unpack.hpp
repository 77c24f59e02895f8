// Register-level unpacking of the K-quant packed scales (no memory access beyond the block bytes).
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

namespace q35::quant {

// The 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 packed bytes s[]:
//   j < 4:  sc = s[j] & 63,                          m = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,  m = (s[j+4] >> 4) | (s[j] >> 6) << 4
// (ggml's get_scale_min_k4).
struct scale_min {
  int sc;
  int m;
};
Q35_HOST_DEVICE scale_min unpack_scale_min_k4(int j, const uint8_t* s) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}

}  // namespace q35::quant
