// --prompt-cache FILE: the decoder's state after a prompt (tokens, recurrent states, KV of the
// prompt's tokens, last logits) saved to a file, and resumed when a later prompt starts with the same
// tokens. A recurrent (Gated DeltaNet) state cannot be rolled back, so the file holds one checkpoint:
// the position at the end of the saved prompt. A prompt that diverges before it is evaluated whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "q35/io/gguf.hpp"

namespace q35::cli {

// Restores the cached state into `dec` when the cache exists, belongs to this model and KV type, and
// its tokens are a prefix of `prompt`; returns the number of prompt tokens restored (0: none; a
// message on stderr says why). Throws on a damaged cache file, naming it.
size_t resume_from_cache(const std::string& path, const io::gguf_file& model, gen::decoder& dec,
                         const std::vector<int32_t>& prompt);

// Saves `dec`'s state (after its tokens) to `path` (written to a temporary file, then renamed); throws
// naming the path when it cannot be written.
void save_cache(const std::string& path, const io::gguf_file& model, const gen::decoder& dec);

}  // namespace q35::cli
