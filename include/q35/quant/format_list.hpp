// The run-time ggml type id -> format type bridge (one dispatch over the supported ids).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/quant/formats.hpp"

namespace q35::quant {

template <type_id Id>
struct format_of;
template <>
struct format_of<type_id::f32> : std::type_identity<f32_format> {};
template <>
struct format_of<type_id::f16> : std::type_identity<f16_format> {};
template <>
struct format_of<type_id::bf16> : std::type_identity<bf16_format> {};
template <>
struct format_of<type_id::q8_0> : std::type_identity<q8_0_format> {};
template <>
struct format_of<type_id::q4_0> : std::type_identity<q4_0_format> {};
template <>
struct format_of<type_id::q4_k> : std::type_identity<q4_k_format> {};
template <>
struct format_of<type_id::q5_k> : std::type_identity<q5_k_format> {};
template <>
struct format_of<type_id::q6_k> : std::type_identity<q6_k_format> {};

// Whether q35 can read tensors of ggml type id `ggml_type`.
constexpr bool is_supported(uint32_t ggml_type) {
  for (uint32_t id : {0u, 1u, 30u, 8u, 2u, 12u, 13u, 14u})
    if (id == ggml_type) return true;
  return false;
}

// Calls f(std::type_identity<Format>{}) for the format with ggml type id `ggml_type`; an
// unsupported id is an `unsupported` status naming it.
template <class F>
status with_format(uint32_t ggml_type, F&& f) {
  if (!is_supported(ggml_type))
    return error(status_code::unsupported, "ggml type " + std::to_string(ggml_type) +
                                               " is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)");
  return dispatch<0u, 1u, 30u, 8u, 2u, 12u, 13u, 14u>(ggml_type, [&](auto id) -> status {
    using format = typename format_of<type_id(decltype(id)::value)>::type;
    using r = decltype(f(std::type_identity<format>{}));
    if constexpr (std::is_same_v<r, status>) {
      return f(std::type_identity<format>{});
    } else {
      f(std::type_identity<format>{});
      return status::success();
    }
  });
}

}  // namespace q35::quant
