// The exception thrown by the host-only tokenizer and chat template when input or vocabulary is unusable.
#pragma once

#include <stdexcept>
#include <string>

namespace q35::io {

struct tokenizer_error : std::runtime_error {
  explicit tokenizer_error(const std::string& what) : std::runtime_error("tokenizer: " + what) {}
};

}  // namespace q35::io
