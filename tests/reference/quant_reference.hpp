// Host reference dequantization written after ggml's dequantize_row_* (ggml-quants.c), independent
// of include/q35/quant: walks each block in ggml's own loop order. Checked against the gguf-py
// goldens in tests/quant, then used to build float64 references for the GEMV/GEMM tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace q35::ref {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else {
    const float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// Dequantizes n elements of ggml type `type` from raw block bytes (ggml loop order, no FMA).
inline std::vector<float> dequantize(uint32_t type, const uint8_t* x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  float* out = y.data();
  auto bits_to_f32 = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  switch (type) {
    case 0:  // f32
      for (int64_t i = 0; i < n; ++i)
        out[i] =
            bits_to_f32(uint32_t(x[4 * i] | x[4 * i + 1] << 8 | x[4 * i + 2] << 16) | uint32_t(x[4 * i + 3]) << 24);
      break;
    case 1:  // f16
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(rd16(x + 2 * i));
      break;
    case 30:  // bf16
      for (int64_t i = 0; i < n; ++i) out[i] = bits_to_f32(uint32_t(rd16(x + 2 * i)) << 16);
      break;
    case 8:  // q8_0: 34-byte blocks
      for (int64_t b = 0; b < n / 32; ++b, x += 34) {
        const float d = f16_to_f32(rd16(x));
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = float(int8_t(x[2 + j])) * d;
      }
      break;
    case 2:  // q4_0: 18-byte blocks
      for (int64_t b = 0; b < n / 32; ++b, x += 18) {
        const float d = f16_to_f32(rd16(x));
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = float((x[2 + j] & 0x0F) - 8) * d;
          out[b * 32 + j + 16] = float((x[2 + j] >> 4) - 8) * d;
        }
      }
      break;
    case 12:    // q4_K: 144-byte blocks
    case 13: {  // q5_K: 176-byte blocks
      const bool five = type == 13;
      for (int64_t b = 0; b < n / 256; ++b) {
        const float d = f16_to_f32(rd16(x)), dmin = f16_to_f32(rd16(x + 2));
        const uint8_t* scales = x + 4;
        const uint8_t* qh = x + 16;
        const uint8_t* ql = x + (five ? 48 : 16);
        float* yb = out + b * 256;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) {
          uint8_t sc, m;
          get_scale_min_k4(is + 0, scales, &sc, &m);
          const float d1 = d * sc, m1 = dmin * m;
          get_scale_min_k4(is + 1, scales, &sc, &m);
          const float d2 = d * sc, m2 = dmin * m;
          for (int l = 0; l < 32; ++l) {
            const int q = (ql[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0);
            const float p = d1 * float(q);
            yb[j + l] = p - m1;
          }
          for (int l = 0; l < 32; ++l) {
            const int q = (ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0);
            const float p = d2 * float(q);
            yb[j + 32 + l] = p - m2;
          }
          ql += 32;
          is += 2;
          u1 = uint8_t(u1 << 2);
          u2 = uint8_t(u2 << 2);
        }
        x += five ? 176 : 144;
      }
      break;
    }
    case 14:  // q6_K: 210-byte blocks
      for (int64_t b = 0; b < n / 256; ++b, x += 210) {
        const float d = f16_to_f32(rd16(x + 208));
        const uint8_t* ql = x;
        const uint8_t* qh = x + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
        float* yb = out + b * 256;
        for (int n128 = 0; n128 < 256; n128 += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = int((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = int((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            const float s1 = d * float(sc[is + 0]), s2 = d * float(sc[is + 2]);
            const float s3 = d * float(sc[is + 4]), s4 = d * float(sc[is + 6]);
            yb[n128 + l + 0] = s1 * float(q1);
            yb[n128 + l + 32] = s2 * float(q2);
            yb[n128 + l + 64] = s3 * float(q3);
            yb[n128 + l + 96] = s4 * float(q4);
          }
          ql += 64;
          qh += 32;
          sc += 8;
        }
      }
      break;
    default:
      throw std::invalid_argument("ref::dequantize: unsupported ggml type");
  }
  return y;
}

}  // namespace q35::ref
