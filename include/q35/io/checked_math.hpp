// Overflow-checked unsigned arithmetic for sizes and offsets read from untrusted files.
#pragma once

#include <cstdint>
#include <optional>

namespace q35::io {

// a + b, or nullopt when it does not fit in uint64.
constexpr std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  if (a > UINT64_MAX - b) return std::nullopt;
  return a + b;
}

// a * b, or nullopt when it does not fit in uint64.
constexpr std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return std::nullopt;
  return a * b;
}

// The smallest multiple of `alignment` (a power of two) that is >= x, or nullopt on overflow.
constexpr std::optional<uint64_t> checked_align_up(uint64_t x, uint64_t alignment) {
  const auto padded = checked_add(x, alignment - 1);
  if (!padded) return std::nullopt;
  return *padded & ~(alignment - 1);
}

constexpr bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static_assert(!checked_add(UINT64_MAX, 1) && *checked_add(2, 3) == 5);
static_assert(!checked_mul(uint64_t(1) << 32, uint64_t(1) << 32) && *checked_mul(0, UINT64_MAX) == 0);
static_assert(*checked_align_up(33, 32) == 64 && !checked_align_up(UINT64_MAX - 3, 32));

}  // namespace q35::io
