// expert_trace: a traced workload read back, for the memory planner (--expert-plan FILE).
//
// The file is what `qwen35_generate --expert-stats FILE` writes (docs/moe.md): per MoE layer, the
// selections each expert received over a session. plan_memory then gives each MoE layer the slots
// that save the most bus bytes for that workload and fills them with its most selected experts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "q35/core/status.hpp"
#include "q35/io/model_hparams.hpp"

namespace q35::gen {

// Reads the `--expert-stats` JSON at `path` for a model of hyper-parameters `h`: out[j][e] = the
// selections of expert e in the j-th MoE layer. The file must name the model's expert count and list
// exactly its MoE layers in order (each "layer" index, "tokens_per_expert" of n_experts non-negative
// integers); anything else is an error naming the file, the key and the value found.
status read_expert_trace(const std::string& path, const io::model_hparams& h, std::vector<std::vector<uint64_t>>& out);

}  // namespace q35::gen
