// --bench output: the results as JSON and as the summary table.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bench_report.hpp"
#include "memory_plan.hpp"

namespace q35::cli::bench {

std::string budget_tag(const model_result& r) { return r.budget ? " @ " + gen::format_bytes(r.budget) : std::string(); }

namespace {
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}
std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}
}  // namespace

bool check_resident_digests(std::ostream& out, const std::vector<model_result>& results) {
  bool same = true;
  // rows of r and of the all-resident a with equal keys: their digests, one line each
  const auto compare = [&](const model_result& r, const model_result& a, const auto& mine, const auto& theirs, auto key,
                           const char* what, const char* after) {
    for (const auto& d : mine)
      for (const auto& e : theirs) {
        if (key(d) != key(e)) continue;
        const bool eq = d.logits_digest == e.logits_digest;
        same = same && eq;
        out << r.name << budget_tag(r) << ", " << what << key(d) << ": logits after " << after << " "
            << (eq ? "bit-identical to" : "DIFFER from") << " the all-resident row" << budget_tag(a) << "\n";
      }
  };
  for (const model_result& r : results) {
    if (!r.skipped.empty() || r.slots < 0) continue;
    for (const model_result& a : results) {
      if (a.name != r.name || !a.skipped.empty() || a.slots >= 0) continue;
      compare(
          r, a, r.prefill, a.prefill, [](const prefill_result& p) { return p.tokens; }, "pp", "the prompt");
      compare(
          r, a, r.decode, a.decode, [](const context_result& d) { return d.context; }, "ctx ", "tg");
    }
  }
  return same;
}

std::string num(double v, int prec) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(prec);
  s << std::fixed << v;
  return s.str();
}

void write_json(const std::string& path, const device_facts& dev, const bench_plan& plan,
                const std::vector<model_result>& results) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw std::runtime_error("--bench-json: cannot write '" + path + "'");
  f << "{\n  \"device\": \"" << json_escape(dev.name) << "\",\n";
  f << "  \"backend\": \"" << (dev.gpu ? "cuda" : "sim") << "\",\n";
  f << "  \"meaningful\": " << (dev.gpu ? "true" : "false") << ",\n";
  f << "  \"copy_gbps\": " << num(dev.copy_gbps, 1) << ",\n";
  f << "  \"zero_copy_gbps\": " << num(dev.zero_copy_gbps, 1) << ",\n";
  f << "  \"tg_tokens\": " << plan.tg << ",\n  \"models\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const model_result& r = results[i];
    f << (i ? "," : "") << "\n    {\"name\": \"" << json_escape(r.name) << "\", \"source\": \"" << json_escape(r.source)
      << "\"";
    if (!r.skipped.empty()) {
      f << ", \"vram_budget\": " << r.budget << ", \"skipped\": \"" << json_escape(r.skipped) << "\"}";
      continue;
    }
    f << ", \"vram_budget\": " << r.budget << ", \"expert_slots\": " << r.slots << ", \"n_experts\": " << r.n_experts
      << ", \"host_expert_bytes\": " << r.host_bytes << ", \"plan\": \"" << json_escape(r.plan) << "\",\n     ";
    f << "\"weight_bytes\": " << r.weight_bytes << ", \"cuda_graphs\": " << (r.graphs ? "true" : "false");
    if (!r.graph_failure.empty()) f << ", \"cuda_graph_failure\": \"" << json_escape(r.graph_failure) << "\"";
    f << ",\n     \"weight_bytes_per_token\": " << num(r.weight_bytes_per_token, 0)
      << ", \"gdn_state_bytes_per_token\": " << num(r.state_bytes_per_token, 0) << ",\n     \"prefill\": [";
    for (size_t k = 0; k < r.prefill.size(); ++k)
      f << (k ? ", " : "") << "{\"tokens\": " << r.prefill[k].tokens << ", \"tok_s\": " << num(r.prefill[k].tok_s, 1)
        << ", \"logits_digest\": \"" << hex64(r.prefill[k].logits_digest) << "\""
        << "}";
    f << "],\n     \"decode\": [";
    for (size_t k = 0; k < r.decode.size(); ++k) {
      const context_result& d = r.decode[k];
      f << (k ? "," : "") << "\n       {\"context\": " << d.context << ", \"tok_s\": " << num(d.tok_s, 1)
        << ", \"ms_per_token\": " << num(d.ms_per_token, 4) << ", \"bytes_per_token\": " << num(d.bytes_per_token, 0)
        << ", \"kv_bytes_per_token\": " << num(d.kv_bytes, 0) << ", \"roofline_tok_s\": " << num(d.roofline_tok_s, 1)
        << ", \"roofline_pct\": " << num(d.roofline_pct, 1) << ", \"distinct_greedy_ids\": " << d.distinct_ids
        << ", \"finite_logits\": " << (d.finite ? "true" : "false") << ", \"logits_digest\": \""
        << hex64(d.logits_digest) << "\"";
      if (d.hit_rate >= 0)
        f << ", \"expert_hit_rate\": " << num(d.hit_rate, 4)
          << ", \"host_bytes_per_token\": " << num(d.host_bytes_per_token, 0)
          << ", \"promotions_per_token\": " << num(d.promotions_per_token, 3);
      f << ",\n        \"step_ms\": {";
      for (int c = 0; c < n_cat; ++c) f << (c ? ", " : "") << "\"" << category_keys[c] << "\": " << num(d.b.ms[c], 4);
      f << ", \"eager_forward\": " << num(d.b.eager_forward_ms, 4)
        << ", \"graph_forward\": " << num(d.b.graph_forward_ms, 4)
        << ", \"eager_minus_graph\": " << num(d.b.eager_forward_ms - d.b.graph_forward_ms, 4) << "}}";
    }
    f << "]}";
  }
  f << "\n  ]\n}\n";
}

void print_table(std::ostream& out, const device_facts& dev, const bench_plan& plan,
                 const std::vector<model_result>& results) {
  char line[512];
  out << "\n== q35 --bench: " << dev.name;
  if (dev.copy_gbps > 0) out << ", measured copy bandwidth " << num(dev.copy_gbps, 0) << " GB/s";
  if (dev.zero_copy_gbps > 0) out << ", zero-copy read of host memory " << num(dev.zero_copy_gbps, 1) << " GB/s";
  out << " ==\n";
  if (!dev.gpu) out << "(sim backend: tiny shapes on the host emulator; these timings mean nothing for GPUs)\n";
  std::snprintf(line, sizeof line, "%-26s %7s %-24s %6s %9s %8s %8s %10s %7s\n", "model", "GB", "prefill tok/s", "ctx",
                "tg tok/s", "ms/tok", "GB/tok", "roof tok/s", "%roof");
  out << line;
  for (const model_result& r : results) {
    if (!r.skipped.empty()) {
      out << r.name << budget_tag(r) << ": skipped (" << r.skipped << ")\n";
      continue;
    }
    std::string pp;
    for (const prefill_result& p : r.prefill) {
      if (!pp.empty()) pp += ' ';
      pp += "pp";
      pp += std::to_string(p.tokens);
      pp += '=';
      pp += num(p.tok_s, 0);
    }
    for (size_t k = 0; k < r.decode.size(); ++k) {
      const context_result& d = r.decode[k];
      std::snprintf(line, sizeof line, "%-26s %7s %-24s %6lld %9.1f %8.3f %8.3f %10s %7s\n",
                    k == 0 ? r.name.substr(0, 26).c_str() : "",
                    k == 0 ? num(double(r.weight_bytes) * 1e-9, 2).c_str() : "", k == 0 ? pp.substr(0, 24).c_str() : "",
                    (long long)d.context, d.tok_s, d.ms_per_token, d.bytes_per_token * 1e-9,
                    d.roofline_tok_s > 0 ? num(d.roofline_tok_s, 0).c_str() : "-",
                    d.roofline_tok_s > 0 ? num(d.roofline_pct, 1).c_str() : "-");
      out << line;
      if (k == 0 && r.name.size() > 26) out << "    model: " << r.name << "\n";
      if (k == 0 && pp.size() > 24) out << "    prefill: " << pp << "\n";
    }
    if (r.slots >= 0) {
      out << "    experts" << budget_tag(r) << ": " << r.slots << " of " << r.n_experts
          << " per MoE layer on the device, " << gen::format_bytes(r.host_bytes) << " in host memory;";
      for (const context_result& d : r.decode)
        out << " ctx " << d.context << ": hit " << num(100.0 * d.hit_rate, 1) << " %, "
            << num(d.host_bytes_per_token * 1e-6, 1) << " MB/tok from host, " << num(d.promotions_per_token, 2)
            << " promotions/tok;";
      out << "\n";
    }
    if (!r.graph_failure.empty()) out << "    no CUDA graphs: " << r.graph_failure << "\n";
    for (const context_result& d : r.decode) {
      out << "    step @ ctx " << d.context << " (us, eager, split by call):";
      for (int c = 0; c < n_cat; ++c)
        if (d.b.ms[c] > 0) out << " " << category_names[c] << " " << num(1e3 * d.b.ms[c], 1) << ";";
      out << " eager fwd " << num(1e3 * d.b.eager_forward_ms, 1) << ", " << (r.graphs ? "graph" : "as run") << " fwd "
          << num(1e3 * d.b.graph_forward_ms, 1) << ", gap "
          << num(1e3 * (d.b.eager_forward_ms - d.b.graph_forward_ms), 1) << (d.finite ? "" : "  NON-FINITE LOGITS")
          << "\n";
    }
  }
  (void)plan;
}

std::string default_json_path(const device_facts& dev) {
  std::string n;
  for (char c : dev.name) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return "bench_" + n + ".json";
}

}  // namespace q35::cli::bench
