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
    if (host_experts() && uniform_slots()) {
      s += ", expert slots and index " + format_bytes(expert_device_bytes()) + " (" + std::to_string(slots) + " of " +
           std::to_string(n_experts) + " experts x " + std::to_string(n_moe_layers) + " MoE layers)";
    } else if (host_experts()) {
      std::string per;
      for (const int n : layer_slots) {
        if (!per.empty()) per += ',';
        per += std::to_string(n);
      }
      s += ", expert slots and index " + format_bytes(expert_device_bytes()) + " (" + per + " of " +
           std::to_string(n_experts) + " experts in the " + std::to_string(n_moe_layers) + " MoE layers, traced)";
    } else
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

bool memory_plan::uniform_slots() const {
  return std::all_of(layer_slots.begin(), layer_slots.end(), [&](int n) { return n == slots; });
}

expert_slot_plan plan_expert_slots(const std::vector<uint64_t>& expert_bytes,
                                   const std::vector<std::vector<uint64_t>>& counts, uint64_t bytes) {
  expert_slot_plan p;
  p.slots.assign(expert_bytes.size(), 0);
  p.first.resize(expert_bytes.size());
  struct pick {
    uint64_t count;
    int rank, layer, expert;
  };
  std::vector<pick> picks;
  for (size_t j = 0; j < counts.size() && j < expert_bytes.size(); ++j) {
    std::vector<int> order(counts[j].size());
    for (size_t e = 0; e < order.size(); ++e) order[e] = int(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return counts[j][size_t(a)] > counts[j][size_t(b)]; });
    for (size_t r = 0; r < order.size(); ++r) picks.push_back({counts[j][size_t(order[r])], int(r), int(j), order[r]});
  }
  std::sort(picks.begin(), picks.end(), [](const pick& a, const pick& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.rank != b.rank ? a.rank < b.rank : a.layer < b.layer;
  });
  // a layer's picks come in its rank order and what is left only shrinks, so once one of a layer's
  // experts no longer fits, none of its later ones will: its slots hold its most selected experts
  for (const pick& k : picks) {
    const size_t j = size_t(k.layer);
    if (expert_bytes[j] > bytes) continue;
    bytes -= expert_bytes[j];
    ++p.slots[j];
    p.first[j].push_back(k.expert);
  }
  return p;
}

status plan_memory(const io::gguf_file& f, const io::model_hparams& h, const io::model_weights& w,
                   const decoder_config& cfg, uint64_t budget, std::optional<int64_t> slots, memory_plan& out,
                   const std::vector<std::vector<uint64_t>>* trace) {
  return plan_memory(h, w, device_model::weight_bytes_for(f, w, false), device_model::weight_bytes_for(f, w, true), cfg,
                     budget, slots, out, trace);
}

status plan_memory(const io::model_hparams& h, const io::model_weights& w, uint64_t all_weights,
                   uint64_t non_expert_weights, const decoder_config& cfg, uint64_t budget,
                   std::optional<int64_t> slots, memory_plan& out, const std::vector<std::vector<uint64_t>>* trace) {
  out = {};
  out.budget = budget;
  out.n_experts = int(h.n_experts);
  out.n_moe_layers = int(h.count(models::ffn_type::moe));
  if (slots && *slots < 0)
    return error(status_code::invalid_argument, "memory plan: " + std::to_string(*slots) + " expert slots per layer");
  std::vector<expert_layer_shape> shapes;
  if (out.n_moe_layers) Q35_TRY(expert_layer_shapes(w, shapes));
  for (const expert_layer_shape& l : shapes) {
    out.slot_bytes += l.expert_bytes();
    out.layer_expert_bytes.push_back(l.expert_bytes());
  }
  out.experts = uint64_t(out.n_experts) * out.slot_bytes;
  if (trace && trace->size() != shapes.size())
    return error(status_code::invalid_argument, "memory plan: a trace of " + std::to_string(trace->size()) +
                                                    " MoE layers, the model has " + std::to_string(shapes.size()));
  for (size_t j = 0; trace && j < trace->size(); ++j)
    if ((*trace)[j].size() != size_t(out.n_experts))
      return error(status_code::invalid_argument,
                   "memory plan: the trace's MoE layer " + std::to_string(shapes[j].index) + " counts " +
                       std::to_string((*trace)[j].size()) + " experts, the model has " + std::to_string(out.n_experts));
  // a fixed count in every layer, holding the trace's most selected experts first (if any)
  const auto uniform = [&](int n) {
    out.slots = n;
    out.layer_slots.assign(shapes.size(), n);
    out.first_experts.clear();
    if (!trace) return;
    out.first_experts.resize(shapes.size());
    for (size_t j = 0; j < shapes.size(); ++j) {
      std::vector<int> order(size_t(out.n_experts));
      for (size_t e = 0; e < order.size(); ++e) order[e] = int(e);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return (*trace)[j][size_t(a)] > (*trace)[j][size_t(b)]; });
      out.first_experts[j].assign(order.begin(), order.begin() + n);
    }
  };

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
  uniform(0);
  out.weights = non_expert_weights;
  out.index_bytes = uint64_t(out.n_moe_layers) * uint64_t(out.n_experts) * 2 * sizeof(int32_t);
  Q35_TRY(decoder::memory_needed(h, cfg, expert_staging_bytes(shapes, out.n_experts, cfg.expert_staging_window),
                                 out.decoder));
  const uint64_t fixed = out.device_bytes();
  if (slots) {
    uniform(int(*slots));
    if (out.device_bytes() > budget) return over(std::to_string(*slots) + " expert slots per MoE layer");
    return status::success();
  }
  if (fixed > budget)
    return error(status_code::out_of_memory,
                 "memory plan: the budget of " + exact(budget) + " is below the " + exact(fixed) +
                     " of device memory that the model needs with every routed expert in host memory (" +
                     out.describe() + ")");
  if (!trace) {
    uniform(int(std::min<uint64_t>(uint64_t(out.n_experts - 1), (budget - fixed) / out.slot_bytes)));
    return status::success();
  }
  const expert_slot_plan p = plan_expert_slots(out.layer_expert_bytes, *trace, budget - fixed);
  out.layer_slots = p.slots, out.first_experts = p.first;
  out.slots = int(p.total() / int64_t(shapes.size()));
  return status::success();
}

}  // namespace q35::gen
