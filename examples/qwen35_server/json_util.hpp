// What the qwen35_server_api sources share: the JSON type (key order kept, as Python's json and the
// Jinja template see it), dumping that never throws on bad UTF-8, and the template's value printing.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace q35::server::detail {

using json = nlohmann::ordered_json;

// Compact JSON; invalid UTF-8 in strings (generated text cut inside a character) becomes U+FFFD.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline constexpr std::string_view space_chars = " \t\n\r\f\v";
inline bool is_space(char c) { return space_chars.find(c) != std::string_view::npos; }

// Python's repr(float): the shortest digits that read back to v, in scientific notation when the
// decimal exponent is below -4 or at least 16 ("1e+16", "1e-05", "0.0001", "100.0").
std::string py_float(double v);
// The template's `value|tojson`: Python's json.dumps(value, ensure_ascii=False) with ", " and ": ".
void py_dump(const json& j, std::string& out);
inline std::string py_dump(const json& j) {
  std::string out;
  py_dump(j, out);
  return out;
}
// What the template prints for a tool call argument: objects and arrays through tojson, strings as
// they are, other values as Python's str() ("True", "None", "3", "2.5").
std::string template_value(const json& j);

}  // namespace q35::server::detail
