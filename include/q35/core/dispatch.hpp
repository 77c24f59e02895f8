// dispatch<Values...>(v, f): the one bridge from a run-time value to a compile-time constant.
//
//   dispatch<1, 2, 4, 8>(n_tokens, [&](auto n) { return launch::gemv<decltype(n)::value>(...); });
//
// f is called with std::integral_constant<decltype(v), V> for the V equal to v. The result is a
// q35::status: f's own status when f returns one, ok when f returns void, and invalid_argument
// naming the value and the supported set when v matches none of Values.
#pragma once

#include <sstream>
#include <type_traits>
#include <utility>

#include "q35/core/status.hpp"

namespace q35 {

namespace detail {

template <auto... Values, class V>
status dispatch_unmatched(V v) {
  std::ostringstream os;
  os << "value " << +v << " is not supported here (supported:";
  ((os << ' ' << +static_cast<V>(Values)), ...);
  os << ')';
  return error(status_code::invalid_argument, os.str());
}

// Tries First, then Rest...; All is the whole list, for the error message. Written without status
// assignments: nvcc warns (#2810-D) on every discarded status& that operator= returns.
template <class All, auto First, auto... Rest, class V, class F>
status dispatch_from(V v, F& f) {
  if (static_cast<V>(First) == v) {
    const std::integral_constant<V, static_cast<V>(First)> constant{};
    using r = std::invoke_result_t<F&, decltype(constant)>;
    if constexpr (std::is_same_v<r, status>) {
      return f(constant);
    } else {
      static_assert(std::is_void_v<r>, "dispatch: f must return void or q35::status");
      f(constant);
      return status::success();
    }
  }
  if constexpr (sizeof...(Rest) > 0) {
    return dispatch_from<All, Rest...>(v, f);
  } else {
    return All::unmatched(v);
  }
}

template <auto... Values>
struct value_list {
  template <class V>
  static status unmatched(V v) {
    return dispatch_unmatched<Values...>(v);
  }
};

}  // namespace detail

template <auto... Values, class V, class F>
status dispatch(V v, F&& f) {
  static_assert(sizeof...(Values) > 0, "dispatch needs at least one candidate value");
  return detail::dispatch_from<detail::value_list<Values...>, Values...>(v, f);
}

}  // namespace q35
