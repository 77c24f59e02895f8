// The expert-selection report's writers: JSON through nlohmann, the SVG heat map as plain text.
#include "expert_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace q35::gen {

namespace {

uint64_t layer_total(const std::vector<uint64_t>& c) {
  uint64_t t = 0;
  for (uint64_t v : c) t += v;
  return t;
}

// share of expert e in a layer's routed tokens (0 for a layer that routed nothing)
double share(const std::vector<uint64_t>& c, size_t e, uint64_t total) {
  return total ? double(c[e]) / double(total) : 0.0;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // control characters are not allowed in XML 1.0 text
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o += c;
    }
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// viridis (a perceptually uniform sequential scale) at t in [0, 1], linear between 9 anchors
std::string viridis(double t) {
  static constexpr std::array<std::array<int, 3>, 9> a = {{{68, 1, 84},
                                                           {72, 40, 120},
                                                           {62, 73, 137},
                                                           {49, 104, 142},
                                                           {38, 130, 142},
                                                           {31, 158, 137},
                                                           {53, 183, 121},
                                                           {110, 206, 88},
                                                           {253, 231, 37}}};
  t = std::clamp(t, 0.0, 1.0) * double(a.size() - 1);
  const size_t i = std::min(size_t(t), a.size() - 2);
  const double f = t - double(i);
  char b[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = int(double(a[i][size_t(c)]) * (1 - f) + double(a[i + 1][size_t(c)]) * f + 0.5);
  std::snprintf(b, sizeof b, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return b;
}

double hit_rate(const expert_report::cache_record& c) {
  return c.hits + c.misses ? double(c.hits) / double(c.hits + c.misses) : 0.0;
}

// "top-8", or with adaptive top-k "adaptive top-(1,2,3)".
std::string top_k_label(const expert_report& r) {
  if (r.adaptive_k_values.empty()) return "top-" + std::to_string(r.n_experts_used);
  std::string s = "adaptive top-(";
  for (size_t i = 0; i < r.adaptive_k_values.size(); ++i) s += (i ? "," : "") + std::to_string(r.adaptive_k_values[i]);
  return s + ")";
}

}  // namespace

std::string expert_report_json(const expert_report& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["arch"] = r.arch;
  j["n_experts"] = r.n_experts;
  j["n_experts_used"] = r.n_experts_used;
  j["tokens"] = r.tokens;
  const bool adaptive = !r.adaptive_k_values.empty();
  if (adaptive) {
    // the thresholds as given (parsed to float): 6 significant digits, so 1.8 reads 1.8
    std::vector<double> below;
    for (const float v : r.adaptive_entropy_below) below.push_back(std::stod(fmt("%.6g", double(v))));
    j["adaptive_k"] = {{"entropy_below", below}, {"k_values", r.adaptive_k_values}};
  } else
    j["adaptive_k"] = nullptr;
  j["note"] =
      std::string(
          "tokens_per_expert[e]: tokens the router sent to expert e over the session (every prompt and "
          "generated token fed to the decoder); ") +
      (adaptive ? "total = the experts read over all tokens (adaptive top-k: between min and max of "
                  "k_values per token); experts_per_token = total / tokens. "
                : "total = tokens x n_experts_used. ") +
      (r.cache.empty() ? "Every expert is resident on the device (no --expert-cache): cache.hits = total, "
                         "misses = 0."
                       : "cache: hits = selections served from a device slot, misses = read from host "
                         "memory by the decode kernels, staged = selections of prompt chunks of more than 8 "
                         "tokens (each expert they selected copied to the device once per chunk), bytes_from_host = "
                         "misses x expert bytes + staging copies from host memory; hit_rate = hits / (hits "
                         "+ misses); slots = the layer's device slots.");
  if (!r.cache.empty()) j["cache_slots"] = r.cache_slots;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const std::vector<uint64_t>& c = r.counts[i];
    const uint64_t total = layer_total(c);
    nlohmann::ordered_json l;
    l["layer"] = r.layers[i];
    l["tokens_per_expert"] = c;
    l["total"] = total;
    l["experts_per_token"] = r.tokens > 0 ? double(total) / double(r.tokens) : 0.0;
    if (r.cache.empty()) {
      l["cache"] = {{"policy", "all resident"}, {"hits", total}, {"misses", 0}, {"bytes_from_host", 0}};
    } else {
      const expert_report::cache_record& cr = r.cache[i];
      l["cache"] = {{"policy", r.cache_policy},
                    {"slots", cr.slots},
                    {"hits", cr.hits},
                    {"misses", cr.misses},
                    {"staged", cr.staged},
                    {"hit_rate", hit_rate(cr)},
                    {"bytes_from_host", cr.host_bytes},
                    {"promotions", cr.promotions}};
    }
    layers.push_back(std::move(l));
  }
  j["layers"] = std::move(layers);
  return j.dump(2) + "\n";
}

std::string expert_heatmap_svg(const expert_report& r) {
  const int n_e = std::max(r.n_experts, 1);
  const int n_l = int(r.layers.size());
  // cells: 256 experts x 40 layers fit in about 1000 x 500 px
  const int cw = n_e <= 16 ? 24 : n_e <= 32 ? 16 : n_e <= 64 ? 10 : n_e <= 128 ? 6 : n_e <= 256 ? 4 : 2;
  const int ch = n_l <= 8 ? 20 : n_l <= 24 ? 14 : 10;
  const int left = 64, top = 64, right = 96;
  const int gw = n_e * cw, gh = n_l * ch;
  const int width = left + std::max(gw, 400) + right;
  const int height = top + gh + 92;
  const int row_font = std::min(ch - 2, 11);

  // colour scale: the smallest to the largest share of any cell
  double lo = 1, hi = 0;
  for (const auto& c : r.counts) {
    const uint64_t total = layer_total(c);
    for (size_t e = 0; e < c.size(); ++e) lo = std::min(lo, share(c, e, total)), hi = std::max(hi, share(c, e, total));
  }
  if (hi < lo) lo = hi = 0;
  auto colour = [&](double s) { return viridis(hi > lo ? (s - lo) / (hi - lo) : 0.0); };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
       "\" font-family=\"sans-serif\">\n";
  o += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" fill=\"white\"/>\n";
  o += "<text x=\"" + std::to_string(left) +
       "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Expert selections: " + xml_escape(r.model) + "</text>\n";
  o += "<text x=\"" + std::to_string(left) + "\" y=\"38\" font-size=\"11\">" + std::to_string(r.tokens) + " tokens, " +
       top_k_label(r) + " of " + std::to_string(r.n_experts) +
       " experts; colour = share of the layer's routed tokens</text>\n";

  // axis titles
  o += "<text x=\"14\" y=\"" + std::to_string(top + gh / 2) + "\" font-size=\"11\" text-anchor=\"middle\" " +
       "transform=\"rotate(-90 14 " + std::to_string(top + gh / 2) + ")\">layer</text>\n";
  o += "<text x=\"" + std::to_string(left + gw / 2) + "\" y=\"" + std::to_string(top + gh + 30) +
       "\" font-size=\"11\" text-anchor=\"middle\">expert</text>\n";
  o += "<text x=\"" + std::to_string(left + gw + 8) + "\" y=\"" + std::to_string(top - 6) +
       "\" font-size=\"10\">cache hit rate</text>\n";

  // the cells, one row per MoE layer, with the layer's index at the left and its hit rate at the right
  o += "<g class=\"cells\" shape-rendering=\"crispEdges\">\n";
  for (int i = 0; i < n_l; ++i) {
    const std::vector<uint64_t>& c = r.counts[size_t(i)];
    const uint64_t total = layer_total(c);
    const int y = top + i * ch;
    o += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(y + ch / 2 + row_font / 2 - 1) +
         "\" font-size=\"" + std::to_string(row_font) + "\" text-anchor=\"end\">" +
         std::to_string(r.layers[size_t(i)]) + "</text>\n";
    for (size_t e = 0; e < c.size(); ++e) {
      const double s = share(c, e, total);
      o += "<rect class=\"cell\" x=\"" + std::to_string(left + int(e) * cw) + "\" y=\"" + std::to_string(y) +
           "\" width=\"" + std::to_string(cw) + "\" height=\"" + std::to_string(ch) + "\" fill=\"" + colour(s) +
           "\"><title>layer " + std::to_string(r.layers[size_t(i)]) + ", expert " + std::to_string(e) + ": " +
           std::to_string(c[e]) + " tokens (" + fmt("%.2f", 100 * s) + "%)</title></rect>\n";
    }
    // every selection is a hit without a cache; with one, hits / (hits + misses) of the decode path
    std::string rate = total ? "100.0%" : "-";
    if (!r.cache.empty()) {
      const expert_report::cache_record& cr = r.cache[size_t(i)];
      rate = cr.hits + cr.misses ? fmt("%.1f", 100 * hit_rate(cr)) + "%" : "-";
    }
    o += "<text class=\"hit-rate\" x=\"" + std::to_string(left + gw + 8) + "\" y=\"" +
         std::to_string(y + ch / 2 + row_font / 2 - 1) + "\" font-size=\"" + std::to_string(row_font) + "\">" + rate +
         "</text>\n";
  }
  o += "</g>\n";

  // expert ticks: every `step` experts, labels at least 20 px apart
  int step = 1;
  while (step * cw < 20) step *= 2;
  for (int e = 0; e < n_e; e += step) {
    const int x = left + e * cw + cw / 2;
    o += "<line x1=\"" + std::to_string(x) + "\" y1=\"" + std::to_string(top + gh) + "\" x2=\"" + std::to_string(x) +
         "\" y2=\"" + std::to_string(top + gh + 4) + "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(top + gh + 14) +
         "\" font-size=\"9\" text-anchor=\"middle\">" + std::to_string(e) + "</text>\n";
  }

  // the colour bar: lo at the left, hi at the right
  const int bar_w = 240, bar_x = left, bar_y = top + gh + 56;
  o += "<defs><linearGradient id=\"scale\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">";
  for (int i = 0; i <= 8; ++i)
    o += "<stop offset=\"" + fmt("%.3f", i / 8.0) + "\" stop-color=\"" + viridis(i / 8.0) + "\"/>";
  o += "</linearGradient></defs>\n";
  o += "<rect class=\"colour-bar\" x=\"" + std::to_string(bar_x) + "\" y=\"" + std::to_string(bar_y) + "\" width=\"" +
       std::to_string(bar_w) + "\" height=\"10\" fill=\"url(#scale)\" stroke=\"black\" stroke-width=\"0.5\"/>\n";
  o += "<text x=\"" + std::to_string(bar_x) + "\" y=\"" + std::to_string(bar_y + 24) + "\" font-size=\"10\">min " +
       fmt("%.2f", 100 * lo) + "%</text>\n";
  o += "<text x=\"" + std::to_string(bar_x + bar_w) + "\" y=\"" + std::to_string(bar_y + 24) +
       "\" font-size=\"10\" text-anchor=\"end\">max " + fmt("%.2f", 100 * hi) + "%</text>\n";
  o += "<text x=\"" + std::to_string(bar_x) + "\" y=\"" + std::to_string(bar_y - 5) +
       "\" font-size=\"10\">share of the layer's routed tokens</text>\n";
  o += "</svg>\n";
  return o;
}

std::string check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return flag + ": empty path";
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return flag + ": '" + path + "' is a directory";
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec)) return flag + ": cannot write '" + path + "': its directory does not exist";
  if (fs::exists(p, ec) ? ::access(path.c_str(), W_OK) != 0 : ::access(dir.c_str(), W_OK) != 0)
    return flag + ": cannot write '" + path + "': permission denied";
  return "";
}

void write_output(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(text.data(), std::streamsize(text.size()));
  if (f) f.close();
  if (!f) throw std::runtime_error(flag + ": cannot write '" + path + "'");
}

}  // namespace q35::gen
