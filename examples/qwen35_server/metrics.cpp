#include "metrics.hpp"

#include <sstream>

namespace q35::server {

std::string metrics_text(const scheduler_metrics& m, const http_counters& http, double uptime_s) {
  std::ostringstream o;
  auto family = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    family(name, type, help);
    o << name << ' ' << value << '\n';
  };
  family("q35_requests_total", "counter", "Generation requests by how they ended (or were refused).");
  o << "q35_requests_total{outcome=\"finished\"} " << m.requests_finished << '\n'
    << "q35_requests_total{outcome=\"cancelled\"} " << m.requests_cancelled << '\n'
    << "q35_requests_total{outcome=\"failed\"} " << m.requests_failed << '\n'
    << "q35_requests_total{outcome=\"rejected\"} " << m.requests_rejected << '\n';
  metric("q35_requests_submitted_total", "counter", "Generation requests accepted by the scheduler.",
         m.requests_submitted);
  metric("q35_http_requests_total", "counter", "HTTP requests received.", http.requests_http.load());
  metric("q35_http_errors_4xx_total", "counter", "Responses with a 4xx status.", http.errors_4xx.load());
  metric("q35_http_errors_5xx_total", "counter", "Responses with a 5xx status.", http.errors_5xx.load());
  metric("q35_prompt_tokens_total", "counter", "Prompt tokens fed to the decoder.", m.tokens_prompt);
  metric("q35_generated_tokens_total", "counter", "Tokens generated.", m.tokens_generated);
  metric("q35_generated_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.",
         m.tokens_per_second_recent);
  metric("q35_generated_tokens_per_second_average", "gauge", "Tokens generated per second since the server started.",
         uptime_s > 0 ? double(m.tokens_generated) / uptime_s : 0.0);
  metric("q35_decoder_steps_total", "counter", "Decoder steps run.", m.steps);
  metric("q35_sequences_lost_total", "counter", "Sequence slots retired because the decoder could not clear them.",
         m.sequences_lost);
  metric("q35_queue_length", "gauge", "Requests waiting for a sequence.", m.queue_length);
  metric("q35_active_sequences", "gauge", "Sequences being decoded.", m.active_sequences);
  metric("q35_kv_pages_used", "gauge", "KV cache pages in use.", m.kv_pages_used);
  metric("q35_kv_pages_capacity", "gauge", "KV cache pages of the pool.", m.kv_pages_total);
  metric("q35_prefix_cache_hits_total", "counter", "Requests that started from a cached prefix.", m.prefix_hits);
  metric("q35_prefix_cache_tokens_reused_total", "counter", "Prompt tokens not computed thanks to cached prefixes.",
         m.prefix_tokens_reused);
  metric("q35_prefix_cache_checkpoints_total", "counter", "Prefix checkpoints taken.", m.prefix_checkpoints);
  metric("q35_prefix_cache_evictions_total", "counter", "Prefix checkpoints dropped for room.", m.prefix_evictions);
  metric("q35_prefix_cache_entries", "gauge", "Prefix checkpoints held.", m.prefix_cached);
  metric("q35_prefix_cache_pages", "gauge", "KV cache pages held by prefix checkpoints.", m.prefix_pages);
  if (m.expert_slots >= 0) {  // routed experts in host memory (--vram, --expert-cache)
    metric("q35_expert_cache_slots", "gauge",
           "Device slots per MoE layer for routed experts (the mean when layers differ).", m.expert_slots);
    family("q35_expert_selections_total", "counter", "Routed-expert selections by where the weights were read.");
    o << "q35_expert_selections_total{source=\"slot\"} " << m.expert_hits << '\n'
      << "q35_expert_selections_total{source=\"host\"} " << m.expert_misses << '\n'
      << "q35_expert_selections_total{source=\"staged\"} " << m.expert_staged << '\n';
    metric("q35_expert_host_bytes_total", "counter", "Bytes read or copied from host memory for routed experts.",
           m.expert_host_bytes);
    metric("q35_expert_promotions_total", "counter", "Routed experts copied into device slots.", m.expert_promotions);
  }
  return o.str();
}

}  // namespace q35::server
