// GET /metrics of qwen35_server: the scheduler's counters and the HTTP side's, as Prometheus text
// (exposition format 0.0.4: a HELP and a TYPE line per metric family, then its samples).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "scheduler.hpp"

namespace q35::server {

// Counters the HTTP side adds to the scheduler's (updated from the connection threads).
struct http_counters {
  std::atomic<int64_t> requests_http{0}, errors_4xx{0}, errors_5xx{0};
};

// The /metrics body; uptime_s: seconds since the server started (the lifetime token rate).
std::string metrics_text(const scheduler_metrics& m, const http_counters& http, double uptime_s);

}  // namespace q35::server
