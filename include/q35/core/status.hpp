// q35::status: the error value every host-side q35 call returns (ok, or a code plus a readable message).
#pragma once

#include <string>
#include <utility>

namespace q35 {

enum class status_code {
  ok = 0,
  invalid_argument,  // a caller-supplied value is out of range or inconsistent
  unsupported,       // a valid request this build or device cannot serve
  out_of_memory,     // device (or sim) allocation failed
  launch_failed,     // the kernel could not be launched (configuration, driver)
  kernel_fault,      // the kernel itself failed (sim misuse check, device fault)
  io_error,          // file or stream problem
};

inline const char* to_string(status_code c) {
  switch (c) {
    case status_code::ok:
      return "ok";
    case status_code::invalid_argument:
      return "invalid argument";
    case status_code::unsupported:
      return "unsupported";
    case status_code::out_of_memory:
      return "out of memory";
    case status_code::launch_failed:
      return "launch failed";
    case status_code::kernel_fault:
      return "kernel fault";
    case status_code::io_error:
      return "i/o error";
  }
  return "unknown";
}

class [[nodiscard]] status {
 public:
  status() = default;
  status(status_code code, std::string message) : code_(code), message_(std::move(message)) {}

  static status success() { return {}; }

  bool ok() const { return code_ == status_code::ok; }
  explicit operator bool() const { return ok(); }
  status_code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<code>: <message>", suitable for printing.
  std::string to_string() const {
    if (ok()) return "ok";
    return std::string(q35::to_string(code_)) + ": " + message_;
  }

 private:
  status_code code_ = status_code::ok;
  std::string message_;
};

inline status error(status_code code, std::string message) { return {code, std::move(message)}; }

}  // namespace q35

// Returns from the enclosing function when `expr` (a q35::status) is not ok.
#define Q35_TRY(expr)                        \
  do {                                       \
    ::q35::status q35_try_s_ = (expr);       \
    if (!q35_try_s_.ok()) return q35_try_s_; \
  } while (0)
