// memory_plan: the non-expert part first, then as many expert slots as the budget holds (see the header).
#include "memory_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "device_model.hpp"
#include "expert_store.hpp"
#include "q35/arch/memory.hpp"

namespace q35::gen {

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b < 1024) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  } else {
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = double(b) / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
  }
  return buf;
}

namespace {
// "1.50 GiB (1610612736 bytes)": what an error names, exact where the rounded figures could look equal.
std::string exact(uint64_t b) { return format_bytes(b) + " (" + std::to_string(b) + " bytes)"; }
}  // namespace

std::optional<uint64_t> parse_memory_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) return std::nullopt;
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!unit.empty() && std::string("KMGT").find(unit[0]) != std::string::npos) {
    scale = std::pow(1024.0, double(std::string("KMGT").find(unit[0]) + 1));
    unit = unit.substr(1);
    if (unit == "IB") unit = "B";
  }
  if (!unit.empty() && unit != "B") return std::nullopt;
  const double v = std::stod(number) * scale;
  if (!(v >= 1) || v > std::ldexp(1.0, 60)) return std::nullopt;
  return uint64_t(v);
}

uint64_t default_memory_budget() {
#if Q35_BACKEND_CUDA
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return UINT64_MAX;  // no device: load() says so
  const uint64_t margin = std::max<uint64_t>(uint64_t(512) << 20, uint64_t(free_b) / 25);
  return free_b > margin ? uint64_t(free_b) - margin : 0;
#else
  return UINT64_MAX;
#endif
}

std::string memory_plan::describe() const {
  std::string s = budget == UINT64_MAX ? std::string("no device limit") : "budget " + format_bytes(budget);
  s += "; on the device " + format_bytes(device_bytes()) + ": weights " + format_bytes(weights) +
       (n_moe_layers ? " (all but the routed experts)" : "");
  if (n_moe_layers) {
    if (host_experts())
      s += ", expert slots and index " + format_bytes(expert_device_bytes()) + " (" + std::to_string(slots) + " of " +
           std::to_string(n_experts) + " experts x " + std::to_string(n_moe_layers) + " MoE layers)";
    else
      s += ", routed experts " + format_bytes(resident_experts) + " (all " + std::to_string(n_experts) + " x " +
           std::to_string(n_moe_layers) + " MoE layers)";
  }
  s += ", KV cache " + format_bytes(decoder.kv) + ", recurrent state " + format_bytes(decoder.recurrent) +
       ", workspace " + format_bytes(decoder.workspace) + ", activations " + format_bytes(decoder.activations) +
       ", other " + format_bytes(decoder.other);
  if (decoder.expert_staging) s += ", expert staging " + format_bytes(decoder.expert_staging);
  if (host_experts()) s += "; in pinned host memory " + format_bytes(host_bytes()) + " (routed experts)";
  return s;
}

status plan_memory(const io::gguf_file& f, const io::model_hparams& h, const io::model_weights& w,
                   const decoder_config& cfg, uint64_t budget, std::optional<int64_t> slots, memory_plan& out) {
  return plan_memory(h, w, device_model::weight_bytes_for(f, w, false), device_model::weight_bytes_for(f, w, true), cfg,
                     budget, slots, out);
}

status plan_memory(const io::model_hparams& h, const io::model_weights& w, uint64_t all_weights,
                   uint64_t non_expert_weights, const decoder_config& cfg, uint64_t budget,
                   std::optional<int64_t> slots, memory_plan& out) {
  out = {};
  out.budget = budget;
  out.n_experts = int(h.n_experts);
  out.n_moe_layers = int(h.count(models::ffn_type::moe));
  if (slots && *slots < 0)
    return error(status_code::invalid_argument, "memory plan: " + std::to_string(*slots) + " expert slots per layer");
  std::vector<expert_layer_shape> shapes;
  if (out.n_moe_layers) Q35_TRY(expert_layer_shapes(w, shapes));
  for (const expert_layer_shape& l : shapes) out.slot_bytes += l.expert_bytes();
  out.experts = uint64_t(out.n_experts) * out.slot_bytes;

  const auto over = [&](const std::string& what) {
    return error(status_code::out_of_memory, "memory plan: " + what + " needs " + exact(out.device_bytes()) +
                                                 " of device memory, above the budget of " + exact(budget) + " (" +
                                                 out.describe() + ")");
  };

  // every expert on the device: when there are none to leave out, when asked, or when it all fits
  const bool all_asked = slots && *slots >= out.n_experts;
  if (out.n_moe_layers == 0 || all_asked || !slots) {
    out.slots = -1;
    out.weights = non_expert_weights;
    out.resident_experts = all_weights - non_expert_weights;
    Q35_TRY(decoder::memory_needed(h, cfg, 0, out.decoder));
    if (out.device_bytes() <= budget) return status::success();
    if (out.n_moe_layers == 0) return over("the model (no MoE layers: nothing can stay in host memory)");
    if (all_asked) return over("every expert on the device (--expert-cache " + std::to_string(*slots) + ")");
  }

  // routed experts in host memory, slots on the device
  out.slots = 0;
  out.weights = non_expert_weights;
  out.index_bytes = uint64_t(out.n_moe_layers) * uint64_t(out.n_experts) * 2 * sizeof(int32_t);
  Q35_TRY(decoder::memory_needed(h, cfg, expert_staging_bytes(shapes, out.n_experts, cfg.expert_staging_window),
                                 out.decoder));
  const uint64_t fixed = out.device_bytes();
  if (slots) {
    out.slots = int(*slots);
    if (out.device_bytes() > budget) return over(std::to_string(*slots) + " expert slots per MoE layer");
    return status::success();
  }
  if (fixed > budget)
    return error(status_code::out_of_memory,
                 "memory plan: the budget of " + exact(budget) + " is below the " + exact(fixed) +
                     " of device memory that the model needs with every routed expert in host memory (" +
                     out.describe() + ")");
  out.slots = int(std::min<uint64_t>(uint64_t(out.n_experts - 1), (budget - fixed) / out.slot_bytes));
  return status::success();
}

}  // namespace q35::gen
