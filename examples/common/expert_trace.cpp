// expert_trace: the --expert-stats JSON read back (see the header).
#include "expert_trace.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace q35::gen {

status read_expert_trace(const std::string& path, const io::model_hparams& h, std::vector<std::vector<uint64_t>>& out) {
  out.clear();
  const std::string where = "--expert-plan " + path + ": ";
  const auto bad = [&](const std::string& what) { return error(status_code::invalid_argument, where + what); };
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad("cannot be read");
  // a trace of 512 experts x 100 layers is under 1 MiB: a far larger file is not one
  constexpr std::streamoff max_bytes = std::streamoff(64) << 20;
  in.seekg(0, std::ios::end);
  if (in.tellg() > max_bytes) return bad("larger than 64 MiB, not an --expert-stats file");
  in.seekg(0);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object (an --expert-stats file)");

  const auto expert_count = j.find("n_experts");
  if (expert_count == j.end() || !expert_count->is_number_unsigned())
    return bad("\"n_experts\" is missing or not a non-negative integer");
  if (expert_count->get<uint64_t>() != h.n_experts)
    return bad("traced with n_experts = " + std::to_string(expert_count->get<uint64_t>()) + ", the model has " +
               std::to_string(h.n_experts));
  std::vector<int> moe;
  for (size_t il = 0; il < h.ffn_kinds.size(); ++il)
    if (h.ffn_kinds[il] == models::ffn_type::moe) moe.push_back(int(il));
  const auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) return bad("\"layers\" is missing or not an array");
  if (layers->size() != moe.size())
    return bad("traces " + std::to_string(layers->size()) + " MoE layers, the model has " + std::to_string(moe.size()));
  for (size_t k = 0; k < moe.size(); ++k) {
    const nlohmann::json& l = (*layers)[k];
    const std::string at = "layers[" + std::to_string(k) + "]";
    if (!l.is_object() || !l.contains("layer") || !l["layer"].is_number_integer())
      return bad(at + " has no integer \"layer\"");
    if (l["layer"].get<int64_t>() != moe[k])
      return bad(at + " is layer " + l["layer"].dump() + ", the model's MoE layer " + std::to_string(k) + " is layer " +
                 std::to_string(moe[k]));
    const auto counts = l.find("tokens_per_expert");
    if (counts == l.end() || !counts->is_array() || counts->size() != h.n_experts)
      return bad(at + ".tokens_per_expert is not an array of " + std::to_string(h.n_experts) + " counts");
    std::vector<uint64_t> row;
    for (const nlohmann::json& c : *counts) {
      if (!c.is_number_unsigned())
        return bad(at + ".tokens_per_expert holds " + c.dump() + ", not a non-negative integer");
      row.push_back(c.get<uint64_t>());
    }
    out.push_back(std::move(row));
  }
  return status::success();
}

}  // namespace q35::gen
