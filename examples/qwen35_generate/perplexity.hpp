// --perplexity: the perplexity of a text (-f FILE) under the model, measured as llama.cpp's
// llama-perplexity measures it, so the numbers compare: the tokens cut into chunks of -c tokens (the
// remainder left out), each chunk evaluated from an empty context, and each token of its second half
// (positions c/2 + 1 .. c - 1) scored under the logits of the tokens before it. PPL = exp(mean NLL) over
// every scored token; "+/-" is PPL x the standard error of that mean. The log-probabilities come from the
// decoder's scoring path (decoder::eval_scored: on the device, 172 B per token back), not from logits rows.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "args.hpp"
#include "decoder.hpp"

namespace q35::cli {

struct perplexity_result {
  int64_t chunks = 0, scored = 0;  // chunks evaluated, tokens scored
  double ppl = 0, ppl_error = 0;
};

// Prints "[i]ppl" after each chunk (the running estimate) and the final estimate to `out`. `ids` is the
// tokenized text; the decoder's sequence 0 is cleared before each chunk. Throws std::runtime_error naming
// the problem (a text shorter than one chunk, a decoder failure).
perplexity_result run_perplexity(const options& opt, const std::vector<int32_t>& ids, gen::decoder& dec,
                                 std::ostream& out);

}  // namespace q35::cli
