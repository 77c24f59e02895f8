// Binding any valid qwen35 / qwen35moe file (shapes from the file, whatever its size), naming the
// known model it matches when there is one.
#pragma once

#include <string>

#include "q35/io/gguf.hpp"
#include "q35/io/model_weights.hpp"

namespace q35::cli {

// io::bind_any_model, and `matched`: the known model's name or a description of an unlisted shape.
inline io::bound_model bind_any_model(const io::gguf_file& f, std::string& matched) {
  io::bound_model m = io::bind_any_model(f);
  matched = !m.traits_name.empty() ? std::string(m.traits_name)
                                   : "unlisted " + m.hparams.arch + " model (" + std::to_string(m.hparams.n_layers) +
                                         " layers, n_embd " + std::to_string(m.hparams.n_embd) + ")";
  return m;
}

}  // namespace q35::cli
