// Host-side table of ggml tensor types: id, name, elements per block and bytes per block, as
// gguf-py 0.19 (GGML_QUANT_SIZES) and ggml.h define them. Sizes a tensor's bytes from its shape.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace q35::io {

// ggml_type ids as stored in a GGUF tensor info (ids 4, 5, 31-33, 36-38 were removed upstream).
enum class ggml_type : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
};

struct ggml_type_traits {
  ggml_type type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", "iq2_xxs"
  uint32_t block_elems;   // elements per block (1 for plain types, 256 = QK_K for k-quants)
  uint32_t block_bytes;   // bytes per block
};

namespace detail {
inline constexpr uint32_t qk_k = 256;  // super-block size of the k-quants and most i-quants
// One row per ggml type; block bytes are written as their struct fields sum (see ggml-common.h).
inline constexpr std::array<ggml_type_traits, 34> ggml_type_table{{
    {ggml_type::f32, "f32", 1, 4},
    {ggml_type::f16, "f16", 1, 2},
    {ggml_type::q4_0, "q4_0", 32, 2 + 16},
    {ggml_type::q4_1, "q4_1", 32, 2 + 2 + 16},
    {ggml_type::q5_0, "q5_0", 32, 2 + 4 + 16},
    {ggml_type::q5_1, "q5_1", 32, 2 + 2 + 4 + 16},
    {ggml_type::q8_0, "q8_0", 32, 2 + 32},
    {ggml_type::q8_1, "q8_1", 32, 4 + 4 + 32},
    {ggml_type::q2_k, "q2_K", qk_k, 2 + 2 + qk_k / 16 + qk_k / 4},
    {ggml_type::q3_k, "q3_K", qk_k, 2 + qk_k / 4 + qk_k / 8 + 12},
    {ggml_type::q4_k, "q4_K", qk_k, 2 + 2 + qk_k / 2 + 12},
    {ggml_type::q5_k, "q5_K", qk_k, 2 + 2 + qk_k / 2 + qk_k / 8 + 12},
    {ggml_type::q6_k, "q6_K", qk_k, 2 + qk_k / 2 + qk_k / 4 + qk_k / 16},
    {ggml_type::q8_k, "q8_K", qk_k, 4 + qk_k + qk_k / 8},
    {ggml_type::iq2_xxs, "iq2_xxs", qk_k, 2 + qk_k / 4},
    {ggml_type::iq2_xs, "iq2_xs", qk_k, 2 + qk_k / 4 + qk_k / 32},
    {ggml_type::iq3_xxs, "iq3_xxs", qk_k, 2 + qk_k / 4 + qk_k / 8},
    {ggml_type::iq1_s, "iq1_s", qk_k, 2 + qk_k / 8 + qk_k / 16},
    {ggml_type::iq4_nl, "iq4_nl", 32, 2 + 16},
    {ggml_type::iq3_s, "iq3_s", qk_k, 2 + qk_k / 4 + qk_k / 8 + qk_k / 32 + 4},
    {ggml_type::iq2_s, "iq2_s", qk_k, 2 + qk_k / 4 + qk_k / 16},
    {ggml_type::iq4_xs, "iq4_xs", qk_k, 2 + 2 + qk_k / 2 + qk_k / 64},
    {ggml_type::i8, "i8", 1, 1},
    {ggml_type::i16, "i16", 1, 2},
    {ggml_type::i32, "i32", 1, 4},
    {ggml_type::i64, "i64", 1, 8},
    {ggml_type::f64, "f64", 1, 8},
    {ggml_type::iq1_m, "iq1_m", qk_k, qk_k / 8 + qk_k / 16 + qk_k / 32},
    {ggml_type::bf16, "bf16", 1, 2},
    {ggml_type::tq1_0, "tq1_0", qk_k, 2 + 4 * 13},
    {ggml_type::tq2_0, "tq2_0", qk_k, 2 + 64},
    {ggml_type::mxfp4, "mxfp4", 32, 1 + 16},
    {ggml_type::nvfp4, "nvfp4", 64, 4 + 32},
    {ggml_type::q1_0, "q1_0", 128, 2 + 16},
}};
}  // namespace detail

// The traits of ggml type `id`, or nullptr for an id ggml does not define (or has removed).
constexpr const ggml_type_traits* find_ggml_type(uint32_t id) {
  for (const auto& t : detail::ggml_type_table)
    if (uint32_t(t.type) == id) return &t;
  return nullptr;
}

constexpr const ggml_type_traits& ggml_traits(ggml_type t) {
  const ggml_type_traits* p = find_ggml_type(uint32_t(t));
  return *p;  // every enumerator has a row (checked below)
}

constexpr std::string_view ggml_type_name(ggml_type t) { return ggml_traits(t).name; }

// Bytes of one row of `ne0` elements: ne0 / block_elems * block_bytes; nullopt when ne0 is not a
// whole number of blocks or the byte count overflows uint64.
constexpr std::optional<uint64_t> ggml_row_bytes(ggml_type t, uint64_t ne0) {
  const auto& tr = ggml_traits(t);
  if (ne0 % tr.block_elems != 0) return std::nullopt;
  const uint64_t blocks = ne0 / tr.block_elems;
  if (blocks > UINT64_MAX / tr.block_bytes) return std::nullopt;
  return blocks * tr.block_bytes;
}

// The sizes the kernel-side block structs must match (ggml-common.h static_asserts).
static_assert(ggml_traits(ggml_type::q8_0).block_bytes == 34);
static_assert(ggml_traits(ggml_type::q4_k).block_bytes == 144);
static_assert(ggml_traits(ggml_type::q5_k).block_bytes == 176);
static_assert(ggml_traits(ggml_type::q6_k).block_bytes == 210);
static_assert(ggml_traits(ggml_type::q2_k).block_bytes == 84);
static_assert(ggml_traits(ggml_type::q3_k).block_bytes == 110);
static_assert(ggml_traits(ggml_type::q8_k).block_bytes == 292);
static_assert(ggml_traits(ggml_type::iq4_xs).block_bytes == 136);

}  // namespace q35::io
