// Binding any valid qwen35 / qwen35moe file (shapes from the file, whatever its size), naming the
// known model it matches when there is one.
#pragma once

#include <string>

#include "q35/io/gguf.hpp"
#include "q35/io/model_match.hpp"
#include "q35/io/model_weights.hpp"

namespace q35::cli {

// Reads the hyper-parameters, checks every tensor and binds the weights; throws gguf_error naming the
// problem. `matched` receives the known model's name, or a description of an unlisted shape.
inline io::bound_model bind_any_model(const io::gguf_file& f, std::string& matched) {
  io::bound_model m;
  m.hparams = io::read_hparams(f);
  io::check_tensors(f, m.hparams);
  matched.clear();
  io::for_each_known_model([&]<class M>() {
    if (!io::compare_hparams(m.hparams, io::hparams_of<M>()).empty()) return false;
    matched = std::string(M::name);
    return true;
  });
  if (matched.empty())
    matched = "unlisted " + m.hparams.arch + " model (" + std::to_string(m.hparams.n_layers) + " layers, n_embd " +
              std::to_string(m.hparams.n_embd) + ")";
  m.weights = io::bind_weights(f, m.hparams);
  return m;
}

}  // namespace q35::cli
