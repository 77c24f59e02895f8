// The one list of weight formats q35 supports, and what derives from it: the run-time ggml type id
// -> format type bridge (one dispatch over the listed ids), the id check and the names shown to users.
// Adding a format: define its struct in formats.hpp and add it to `supported_formats` below.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/quant/formats.hpp"

namespace q35::quant {

// A list of format types and the facts derived from it.
template <class... Formats>
struct format_list {
  static constexpr size_t size = sizeof...(Formats);

  // Whether a listed format has ggml type id `ggml_type`.
  static constexpr bool contains(uint32_t ggml_type) { return ((uint32_t(Formats::id) == ggml_type) || ...); }

  // "f32, f16, ...": the formats' names in list order, for messages.
  static constexpr size_t names_length =
      ((std::char_traits<char>::length(Formats::name) + 2) + ...) - (sizeof...(Formats) > 0 ? 2 : 0);
  static constexpr std::array<char, names_length + 1> names_array = [] {
    std::array<char, names_length + 1> a{};
    size_t k = 0;
    for (const char* n : {Formats::name...}) {
      if (k > 0) {
        a[k++] = ',';
        a[k++] = ' ';
      }
      for (const char* p = n; *p; ++p) a[k++] = *p;
    }
    return a;
  }();
  static constexpr std::string_view names{names_array.data(), names_length};

  // Calls f(id) with std::integral_constant<uint32_t, Id> for the listed id equal to `ggml_type`.
  template <class F>
  static status dispatch_id(uint32_t ggml_type, F&& f) {
    return dispatch<uint32_t(Formats::id)...>(ggml_type, f);
  }
};

// The formats q35 reads: the GGUF weight types of the Qwen3.5 checkpoints, in the order users see them.
using supported_formats =
    format_list<f32_format, f16_format, bf16_format, q8_0_format, q4_0_format, q4_k_format, q5_k_format, q6_k_format>;

namespace detail {
template <type_id Id, class List>
struct format_with_id;
template <type_id Id, class First, class... Rest>
struct format_with_id<Id, format_list<First, Rest...>>
    : std::conditional_t<First::id == Id, std::type_identity<First>, format_with_id<Id, format_list<Rest...>>> {};
}  // namespace detail

// The supported format with ggml type id `Id` (a compile error for an id not in the list).
template <type_id Id>
struct format_of : detail::format_with_id<Id, supported_formats> {};

// Whether q35 can read tensors of ggml type id `ggml_type`.
constexpr bool is_supported(uint32_t ggml_type) { return supported_formats::contains(ggml_type); }

// The supported formats' names, comma-separated, for messages.
inline constexpr std::string_view supported_format_names = supported_formats::names;

// Calls f(std::type_identity<Format>{}) for the format with ggml type id `ggml_type`; an
// unsupported id is an `unsupported` status naming it and the supported formats.
template <class F>
status with_format(uint32_t ggml_type, F&& f) {
  if (!is_supported(ggml_type))
    return error(status_code::unsupported, "ggml type " + std::to_string(ggml_type) + " is not supported (" +
                                               std::string(supported_format_names) + ")");
  return supported_formats::dispatch_id(ggml_type, [&](auto id) -> status {
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
