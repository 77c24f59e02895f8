// The expert-selection report's writers: the JSON parsed back (fields, per-layer sums, the cache block),
// the SVG checked as XML (every tag closed, text escaped), one cell per layer and expert coloured by
// share, the layout of 256 experts x 40 layers, and the output path checks.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "expert_report.hpp"

namespace {

using q35::gen::expert_report;

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Well-formed XML, as far as this writer's output goes: every element closed in order, attribute values
// quoted, no raw '<' or unescaped '&' in text or attributes. Returns "" or the problem.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  size_t i = 0;
  auto bad_amp = [&](size_t b, size_t e) {
    for (size_t p = b; p < e; ++p) {
      if (s[p] != '&') continue;
      const size_t semi = s.find(';', p);
      if (semi == std::string::npos || semi > e) return true;
      const std::string ent = s.substr(p, semi - p + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") return true;
    }
    return false;
  };
  while (i < s.size()) {
    const size_t lt = s.find('<', i);
    if (bad_amp(i, lt == std::string::npos ? s.size() : lt)) return "unescaped & in text";
    if (lt == std::string::npos) break;
    const size_t gt = s.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    const std::string tag = s.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return "'<' inside a tag";
    i = gt + 1;
    if (tag.starts_with("?")) continue;
    if (occurrences(tag, "\"") % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    if (bad_amp(lt, gt)) return "unescaped & in <" + tag + ">";
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (!tag.ends_with("/")) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  return "";
}

expert_report small_report() {
  expert_report r;
  r.model = "tiny \"<moe>\" & co";
  r.arch = "qwen35moe";
  r.n_experts = 8, r.n_experts_used = 2, r.tokens = 10;
  r.layers = {1, 3, 5};
  r.counts = {{2, 2, 2, 2, 3, 3, 3, 3}, {20, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 2, 3, 4, 5, 5, 0}};
  return r;
}

TEST_CASE("expert report: the JSON parses back with every layer's counts, total and cache block") {
  const expert_report r = small_report();
  const auto j = nlohmann::json::parse(q35::gen::expert_report_json(r));
  CHECK(j.at("model") == r.model);
  CHECK(j.at("arch") == "qwen35moe");
  CHECK(j.at("n_experts") == 8);
  CHECK(j.at("n_experts_used") == 2);
  CHECK(j.at("tokens") == 10);
  CHECK(j.at("note").get<std::string>().find("Every expert is resident") != std::string::npos);
  REQUIRE(j.at("layers").size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const auto& l = j.at("layers")[i];
    CHECK(l.at("layer") == r.layers[i]);
    CHECK(l.at("tokens_per_expert").get<std::vector<uint64_t>>() == r.counts[i]);
    const uint64_t total = std::accumulate(r.counts[i].begin(), r.counts[i].end(), uint64_t(0));
    CHECK(total == 20);  // tokens x k
    CHECK(l.at("total") == total);
    CHECK(l.at("cache").at("policy") == "all resident");
    CHECK(l.at("cache").at("hits") == total);
    CHECK(l.at("cache").at("misses") == 0);
    CHECK(l.at("cache").at("bytes_from_host") == 0);
  }
}

TEST_CASE("expert report: the SVG heat map is well-formed XML with one cell per layer and expert") {
  const expert_report r = small_report();
  const std::string svg = q35::gen::expert_heatmap_svg(r);
  INFO(svg.substr(0, 600));
  CHECK(xml_problem(svg) == "");
  CHECK(svg.starts_with("<?xml"));
  CHECK(occurrences(svg, "<svg ") == 1);
  CHECK(occurrences(svg, "<rect class=\"cell\"") == 3 * 8);
  CHECK(occurrences(svg, "class=\"hit-rate\"") == 3);
  CHECK(occurrences(svg, ">100.0%</text>") == 3);
  CHECK(occurrences(svg, "class=\"colour-bar\"") == 1);
  // the title names the model (escaped) and the token count
  CHECK(svg.find("tiny &quot;&lt;moe&gt;&quot; &amp; co") != std::string::npos);
  CHECK(svg.find("<moe>") == std::string::npos);
  CHECK(svg.find("10 tokens") != std::string::npos);
  // the colour scale spans the smallest share (0 %) to the largest (layer 3: 100 %)
  CHECK(svg.find("min 0.00%") != std::string::npos);
  CHECK(svg.find("max 100.00%") != std::string::npos);
  CHECK(svg.find("layer 3, expert 0: 20 tokens (100.00%)</title>") != std::string::npos);
  CHECK(occurrences(svg, "fill=\"#fde725\"><title>") == 1);  // the one cell at the top of the scale
  // row labels: the layers' indices
  for (int layer : r.layers)
    CHECK(svg.find("text-anchor=\"end\">" + std::to_string(layer) + "</text>") != std::string::npos);
}

TEST_CASE("expert report: 256 experts x 40 layers stay within a screen, and every cell is drawn") {
  expert_report r;
  r.model = "big";
  r.n_experts = 256, r.n_experts_used = 8, r.tokens = 1000;
  for (int l = 0; l < 40; ++l) {
    r.layers.push_back(l);
    std::vector<uint64_t> c(256, 0);
    for (int t = 0; t < 8000; ++t) ++c[size_t((t * 7 + l * 13) % 256)];
    r.counts.push_back(c);
  }
  const std::string svg = q35::gen::expert_heatmap_svg(r);
  CHECK(xml_problem(svg) == "");
  CHECK(occurrences(svg, "<rect class=\"cell\"") == 256 * 40);
  CHECK(svg.find("width=\"4\" height=\"10\"") != std::string::npos);  // 4 x 10 px cells
  const size_t w = svg.find("width=\"", svg.find("<svg "));
  const int width = std::stoi(svg.substr(w + 7));
  CHECK(width <= 1400);
  // expert ticks 0, 8, ..., 248 (at most every 20 px)
  CHECK(svg.find("text-anchor=\"middle\">248</text>") != std::string::npos);
  CHECK(svg.find("text-anchor=\"middle\">4</text>") == std::string::npos);
}

TEST_CASE("expert report: output paths") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path();
  CHECK(q35::gen::check_output_path("--expert-stats", "") == "--expert-stats: empty path");
  const std::string missing = (dir / "q35_no_such_dir" / "x.json").string();
  const std::string m = q35::gen::check_output_path("--expert-stats", missing);
  CHECK(m.find("--expert-stats") == 0);
  CHECK(m.find(missing) != std::string::npos);
  CHECK(m.find("does not exist") != std::string::npos);
  CHECK(q35::gen::check_output_path("--expert-heatmap", dir.string()).find("is a directory") != std::string::npos);
  const std::string ok = (dir / "q35_expert_report_test.json").string();
  CHECK(q35::gen::check_output_path("--expert-stats", ok) == "");
  q35::gen::write_output("--expert-stats", ok, "{}\n");
  CHECK(fs::file_size(ok) == 3);
  fs::remove(ok);
  CHECK_THROWS_WITH_AS(q35::gen::write_output("--expert-heatmap", missing, "x"),
                       doctest::Contains("--expert-heatmap: cannot write"), std::runtime_error);
}

}  // namespace
