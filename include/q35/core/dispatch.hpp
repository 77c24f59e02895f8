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

template <auto... Values, class V, class F>
status dispatch(V v, F&& f) {
  static_assert(sizeof...(Values) > 0, "dispatch needs at least one candidate value");
  status result = error(status_code::invalid_argument, "");
  bool matched = false;
  auto try_one = [&](auto constant) {
    if (matched || static_cast<V>(decltype(constant)::value) != v) return;
    matched = true;
    using r = std::invoke_result_t<F&, decltype(constant)>;
    if constexpr (std::is_same_v<r, status>) {
      result = f(constant);
    } else {
      static_assert(std::is_void_v<r>, "dispatch: f must return void or q35::status");
      f(constant);
      result = status::success();
    }
  };
  (try_one(std::integral_constant<V, static_cast<V>(Values)>{}), ...);
  if (!matched) {
    std::ostringstream os;
    os << "value " << +v << " is not supported here (supported:";
    ((os << ' ' << +static_cast<V>(Values)), ...);
    os << ')';
    return error(status_code::invalid_argument, os.str());
  }
  return result;
}

}  // namespace q35
