// GET /metrics (metrics.hpp): the text is Prometheus exposition format 0.0.4 (a HELP and a TYPE line
// before each family's samples, each family once, "name{labels} value" samples with numeric values)
// and every sample carries the counter it names; the expert families appear only with routed experts
// in host memory.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "metrics.hpp"

namespace {

using namespace q35;

struct parsed {
  std::map<std::string, double> samples;     // "name{labels}" -> value
  std::map<std::string, std::string> types;  // family -> counter / gauge
  std::set<std::string> helped;              // families with a HELP line
};

// Parses the text strictly: any line that is not HELP, TYPE or a sample of the family last declared fails.
parsed parse(const std::string& text) {
  parsed p;
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$)");
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-z_]+="[a-z]+"\})? (-?[0-9.e+]+)$)");
  std::istringstream in(text);
  std::string line, family;
  std::smatch m;
  while (std::getline(in, line)) {
    CAPTURE(line);
    if (std::regex_match(line, m, help)) {
      CHECK(p.helped.insert(m[1]).second);  // each family once
      family = m[1];
    } else if (std::regex_match(line, m, type)) {
      CHECK(m[1] == family);  // TYPE right after the family's HELP
      CHECK(p.types.emplace(m[1], m[2]).second);
    } else if (std::regex_match(line, m, sample)) {
      CHECK(m[1] == family);  // samples under their own family's header
      CHECK(p.types.count(family) == 1);
      CHECK(p.samples.emplace(std::string(m[1]) + std::string(m[2]), std::stod(m[3])).second);
    } else {
      FAIL("not a line of the exposition format");
    }
  }
  CHECK((text.empty() || text.back() == '\n'));
  return p;
}

server::scheduler_metrics some_metrics() {
  server::scheduler_metrics m;
  m.requests_submitted = 11, m.requests_rejected = 2, m.requests_finished = 7, m.requests_cancelled = 3;
  m.requests_failed = 1, m.tokens_prompt = 1234, m.tokens_generated = 600, m.queue_length = 4;
  m.active_sequences = 5, m.kv_pages_used = 17, m.kv_pages_total = 64, m.steps = 321, m.sequences_lost = 1;
  m.prefix_hits = 6, m.prefix_tokens_reused = 900, m.prefix_checkpoints = 8, m.prefix_evictions = 2;
  m.prefix_cached = 6, m.prefix_pages = 9, m.tokens_per_second_recent = 12.5;
  return m;
}

TEST_CASE("metrics: Prometheus text carrying the scheduler's and the HTTP side's counters") {
  const server::scheduler_metrics m = some_metrics();
  server::http_counters http;
  http.requests_http = 40, http.errors_4xx = 6, http.errors_5xx = 1;
  const parsed p = parse(server::metrics_text(m, http, 120.0));
  const std::map<std::string, double> want{
      {"q35_requests_total{outcome=\"finished\"}", 7},
      {"q35_requests_total{outcome=\"cancelled\"}", 3},
      {"q35_requests_total{outcome=\"failed\"}", 1},
      {"q35_requests_total{outcome=\"rejected\"}", 2},
      {"q35_requests_submitted_total", 11},
      {"q35_http_requests_total", 40},
      {"q35_http_errors_4xx_total", 6},
      {"q35_http_errors_5xx_total", 1},
      {"q35_prompt_tokens_total", 1234},
      {"q35_generated_tokens_total", 600},
      {"q35_generated_tokens_per_second", 12.5},
      {"q35_generated_tokens_per_second_average", 5.0},  // 600 tokens over 120 s
      {"q35_decoder_steps_total", 321},
      {"q35_sequences_lost_total", 1},
      {"q35_queue_length", 4},
      {"q35_active_sequences", 5},
      {"q35_kv_pages_used", 17},
      {"q35_kv_pages_capacity", 64},
      {"q35_prefix_cache_hits_total", 6},
      {"q35_prefix_cache_tokens_reused_total", 900},
      {"q35_prefix_cache_checkpoints_total", 8},
      {"q35_prefix_cache_evictions_total", 2},
      {"q35_prefix_cache_entries", 6},
      {"q35_prefix_cache_pages", 9},
  };
  CHECK(p.samples == want);
  // counters end in _total (gauges do not), as Prometheus names them
  for (const auto& [family, type] : p.types) {
    CAPTURE(family);
    const bool total = family.size() > 6 && family.compare(family.size() - 6, 6, "_total") == 0;
    CHECK(total == (type == "counter"));
  }
  CHECK(p.helped.size() == p.types.size());
  // no uptime yet: a rate of 0, not a division by zero
  CHECK(parse(server::metrics_text(m, http, 0.0)).samples.at("q35_generated_tokens_per_second_average") == 0.0);
}

TEST_CASE("metrics: the expert families only with routed experts in host memory") {
  server::scheduler_metrics m = some_metrics();
  server::http_counters http;
  const parsed resident = parse(server::metrics_text(m, http, 1.0));
  for (const auto& [name, value] : resident.samples) CHECK(name.find("expert") == std::string::npos);
  m.expert_slots = 3, m.expert_hits = 70, m.expert_misses = 20, m.expert_staged = 10;
  m.expert_host_bytes = 123456789, m.expert_promotions = 4;
  const parsed host = parse(server::metrics_text(m, http, 1.0));
  CHECK(host.samples.at("q35_expert_cache_slots") == 3);
  CHECK(host.samples.at("q35_expert_selections_total{source=\"slot\"}") == 70);
  CHECK(host.samples.at("q35_expert_selections_total{source=\"host\"}") == 20);
  CHECK(host.samples.at("q35_expert_selections_total{source=\"staged\"}") == 10);
  CHECK(host.samples.at("q35_expert_host_bytes_total") == 123456789);
  CHECK(host.samples.at("q35_expert_promotions_total") == 4);
  CHECK(host.samples.size() == resident.samples.size() + 6);
}

}  // namespace
