// Random GGUF weight tensors for the GEMV/GEMM tests: random quant bytes with finite, moderate
// scales, so every bit pattern of the quants and packed sub-block scales occurs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "q35/core/numeric.hpp"
#include "q35/quant/formats.hpp"
#include "reference/quant_reference.hpp"

namespace q35::test {

inline void put_half(uint8_t* p, float v) {
  const uint16_t h = q35::detail::float_to_half_bits(v);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

// Bytes of a [rows][cols] tensor of Format with random contents (elements of magnitude ~1).
template <class Format>
std::vector<uint8_t> random_weights(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n_blocks = rows * cols / Format::block_elems;
  std::vector<uint8_t> b(size_t(n_blocks * Format::block_bytes));
  for (auto& v : b) v = uint8_t(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* p = b.data() + i * Format::block_bytes;
    switch (Format::id) {
      case quant::type_id::f32: {
        const float f = u(rng);
        std::memcpy(p, &f, 4);
        break;
      }
      case quant::type_id::f16:
        put_half(p, u(rng));
        break;
      case quant::type_id::bf16: {
        const uint16_t h = q35::detail::float_to_bf16_bits(u(rng));
        p[0] = uint8_t(h & 0xff), p[1] = uint8_t(h >> 8);
        break;
      }
      case quant::type_id::q8_0:
        put_half(p, u(rng) / 127.0f);
        break;
      case quant::type_id::q4_0:
        put_half(p, u(rng) / 8.0f);
        break;
      case quant::type_id::q4_k:
      case quant::type_id::q5_k:
        put_half(p, u(rng) / 512.0f);     // d: times scale <= 63 times q <= 31
        put_half(p + 2, u(rng) / 64.0f);  // dmin: times min <= 63
        break;
      case quant::type_id::q6_k:
        put_half(p + 208, u(rng) / 2048.0f);  // times scale <= 128 times |q| <= 32
        break;
    }
  }
  return b;
}

// The same tensor dequantized by the independent host reference.
template <class Format>
std::vector<float> reference_weights(const std::vector<uint8_t>& bytes, int64_t n_elems) {
  return ref::dequantize(uint32_t(Format::id), bytes.data(), n_elems);
}

// Per element, the magnitude P of the terms the GEMV's integer path keeps apart (see
// ref::fp32_dot_bound): |d_sub q| + |m_sub| for Q4_K/Q5_K (the tensor dequantized once with dmin
// zeroed and once with d zeroed), |w| for the other formats.
template <class Format>
std::vector<float> weight_parts(const std::vector<uint8_t>& bytes, int64_t n_elems) {
  std::vector<float> p = reference_weights<Format>(bytes, n_elems);
  if constexpr (Format::id == quant::type_id::q4_k || Format::id == quant::type_id::q5_k) {
    std::vector<uint8_t> scaled = bytes, mins = bytes;
    for (size_t b = 0; b < bytes.size(); b += size_t(Format::block_bytes)) {
      scaled[b + 2] = scaled[b + 3] = 0;  // dmin = 0: d_sub q
      mins[b] = mins[b + 1] = 0;          // d = 0: -m_sub
    }
    const auto a = reference_weights<Format>(scaled, n_elems), m = reference_weights<Format>(mins, n_elems);
    for (size_t i = 0; i < p.size(); ++i) p[i] = std::fabs(a[i]) + std::fabs(m[i]);
  } else {
    for (auto& v : p) v = std::fabs(v);
  }
  return p;
}

}  // namespace q35::test
