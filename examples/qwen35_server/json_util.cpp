// The Jinja template's value printing (json_util.hpp): Python's float repr and json.dumps.
#include "json_util.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace q35::server::detail {

std::string py_float(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);  // "-1.25e+16"
  std::string_view s(buf, size_t(r.ptr - buf));
  std::string out;
  if (s.front() == '-') out += '-', s.remove_prefix(1);
  const size_t e = s.find('e');
  std::string digits(1, s[0]);  // the mantissa's digits without its point ("1.25" -> "125")
  if (e > 2) digits.append(s.substr(2, e - 2));
  const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  // appended piece by piece: GCC 12 warned (-Wrestrict, a false positive) on the chained temporaries
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    out += exp < 0 ? "e-" : "e+";
    if (std::abs(exp) < 10) out += '0';
    out += std::to_string(std::abs(exp));
  } else if (exp < 0) {
    out.append("0.").append(size_t(-exp - 1), '0').append(digits);
  } else if (const size_t n_int = size_t(exp) + 1; digits.size() <= n_int) {
    out.append(digits).append(n_int - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, n_int).append(1, '.').append(digits, n_int);
  }
  return out;
}

void py_dump(const json& j, std::string& out) {
  switch (j.type()) {
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        out += first ? "" : ", ";
        first = false;
        py_dump(json(k), out);
        out += ": ";
        py_dump(v, out);
      }
      out += '}';
      break;
    }
    case json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ", ";
        py_dump(j[i], out);
      }
      out += ']';
      break;
    }
    case json::value_t::string: {
      // json.dumps escapes: \" \\ \n \r \t \b \f, other controls as \u00XX (lower-case hex); the rest raw
      out += '"';
      for (const char c : j.get_ref<const std::string&>()) {
        switch (c) {
          case '"':
            out += "\\\"";
            break;
          case '\\':
            out += "\\\\";
            break;
          case '\n':
            out += "\\n";
            break;
          case '\r':
            out += "\\r";
            break;
          case '\t':
            out += "\\t";
            break;
          case '\b':
            out += "\\b";
            break;
          case '\f':
            out += "\\f";
            break;
          default:
            if (static_cast<unsigned char>(c) < 0x20) {
              constexpr char hex[] = "0123456789abcdef";
              out += "\\u00";
              out += hex[(c >> 4) & 0xF];
              out += hex[c & 0xF];
            } else {
              out += c;
            }
        }
      }
      out += '"';
      break;
    }
    case json::value_t::number_float:
      out += py_float(j.get<double>());
      break;
    case json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      break;
    case json::value_t::null:
      out += "null";
      break;
    default:
      out += j.dump();
      break;  // integers (beyond 64 bits nlohmann already holds a float)
  }
}

std::string template_value(const json& j) {
  if (j.is_object() || j.is_array()) return py_dump(j);
  if (j.is_string()) return j.get<std::string>();
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_null()) return "None";
  return py_dump(j);
}

}  // namespace q35::server::detail
