// --perplexity (perplexity.hpp).
#include "perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace q35::cli {

perplexity_result run_perplexity(const options& opt, const std::vector<int32_t>& ids, gen::decoder& dec,
                                 std::ostream& out) {
  const int64_t n_ctx = dec.n_ctx();
  const int64_t available = int64_t(ids.size()) / n_ctx;
  if (available < 1)
    throw std::runtime_error("--perplexity: the text has " + std::to_string(ids.size()) +
                             " tokens, fewer than one chunk of -c " + std::to_string(n_ctx) +
                             " tokens (give a longer text or a smaller -c)");
  if (n_ctx < 4) throw std::runtime_error("--perplexity: -c " + std::to_string(n_ctx) + " is below 4 tokens");
  const int64_t chunks = opt.ppl_chunks ? std::min(*opt.ppl_chunks, available) : available;
  const int64_t first = n_ctx / 2;  // the first half is context only
  char line[128];
  std::snprintf(line, sizeof line, "perplexity: %lld chunk(s) of %lld tokens, scoring the last %lld of each\n",
                (long long)chunks, (long long)n_ctx, (long long)(n_ctx - 1 - first));
  out << line << std::flush;
  perplexity_result r;
  double sum = 0, sum_sq = 0;  // of the NLLs
  std::vector<launch::token_logprobs> scores;
  for (int64_t c = 0; c < chunks; ++c) {
    const std::span<const int32_t> chunk(ids.data() + c * n_ctx, size_t(n_ctx));
    const auto fail = [&](const status& s) {
      if (!s.ok()) throw std::runtime_error("--perplexity: chunk " + std::to_string(c + 1) + ": " + s.message());
    };
    fail(dec.clear());
    fail(dec.eval(chunk.first(size_t(first))));  // context: no answers wanted
    // answer t: the token after chunk[first + t] (the last, which has none, is id -1)
    fail(dec.eval_scored(chunk.subspan(size_t(first)), 0, -1, scores));
    for (int64_t t = 0; t + 1 < int64_t(scores.size()); ++t) {
      const launch::token_logprobs& a = scores[size_t(t)];
      if (a.id != chunk[size_t(first + t + 1)] || !std::isfinite(a.logprob))
        throw std::runtime_error("--perplexity: chunk " + std::to_string(c + 1) + ", token " +
                                 std::to_string(first + t + 1) + ": no finite log-probability (" +
                                 std::to_string(a.logprob) + ")");
      const double nll = -double(a.logprob);
      sum += nll, sum_sq += nll * nll;
      ++r.scored;
    }
    ++r.chunks;
    std::snprintf(line, sizeof line, "[%lld]%.4f,", (long long)(c + 1), std::exp(sum / double(r.scored)));
    out << line << std::flush;
  }
  const double mean = sum / double(r.scored);
  const double var = std::max(0.0, sum_sq / double(r.scored) - mean * mean);
  r.ppl = std::exp(mean);
  r.ppl_error = r.scored > 1 ? r.ppl * std::sqrt(var / double(r.scored - 1)) : 0.0;
  std::snprintf(line, sizeof line, "\nFinal estimate: PPL = %.4f +/- %.4f\n", r.ppl, r.ppl_error);
  out << line << std::flush;
  return r;
}

}  // namespace q35::cli
