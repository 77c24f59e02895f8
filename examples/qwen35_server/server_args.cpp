// qwen35_server's command line (server_args.hpp).
#include "server_args.hpp"

#include <cstdlib>
#include <exception>
#include <iostream>
#include <stdexcept>

#include "memory_plan.hpp"
#include "synth_model.hpp"

namespace q35::server {

const char* const usage_text =
    "usage: qwen35_server -m FILE [options]\n"
    "  -m, --model FILE       GGUF model (qwen35 / qwen35moe)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1)\n"
    "  --port N               port (default 8080; 0: any free port, printed on stdout)\n"
    "  -np, --parallel N      sequences decoded together (default 4)\n"
    "  -c, --ctx-size N       tokens of the KV pool all sequences share; pages are taken on demand, so one\n"
    "                         request may use all of it (default 4096, at most the model's)\n"
    "  -b, --batch-size N     prompt tokens per step (default 512)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' (all endpoints but /health)\n"
    "  -ctk, -ctv TYPE        KV cache element type: f32, f16 (default), bf16\n"
    "  --timeout N            read/write timeout of a connection in seconds (default 600)\n"
    "  --queue N              requests waiting for a sequence at most; more get 503 (default 64;\n"
    "                         -np + --queue at most 4096)\n"
    "  --no-batch-invariant   faster batches whose rows may differ in the last bits with their company\n"
    "  --batch-invariant-gemm batch invariance on tensor cores: decode groups of up to 64 sequences read\n"
    "                         the weights once (not once per 8); a sequence alone decodes slower\n"
    "  --prefix-cache N       prefix checkpoints kept for reuse across requests, each one recurrent state\n"
    "                         in device memory (size printed at start) and the KV pages of its tokens\n"
    "                         (default 16; 0: off)\n"
    "  --vram SIZE            device memory q35 may use (24G, 16000M); MoE models whose experts do not all\n"
    "                         fit keep them in pinned host memory behind as many device slots per layer as\n"
    "                         fit (default: the device's free memory less max(512 MiB, 4%); the sim: no limit)\n"
    "  --expert-cache N       MoE models: N device slots per MoE layer, the other experts in host memory\n"
    "  --expert-plan FILE     MoE models: place the slots by a workload traced with qwen35_generate\n"
    "                         --expert-stats FILE (each layer the slots that save the most bus bytes)\n"
    "  --expert-policy NAME   which experts the slots hold: frequency (default) or lru\n"
    "  --expert-rebalance N   decode steps between rebalances of the slots (default 16; 0: never)\n"
    "  --expert-window N      experts per staging window of a prompt chunk (default 64; fewer: more slots)\n"
    "  --expert-stats FILE    MoE models: when the server stops (SIGINT, SIGTERM), write per MoE layer the\n"
    "                         tokens routed to each expert over every request as JSON (--expert-plan's input)\n"
    "  --expert-heatmap FILE  MoE models: the same counts as an SVG heat map (layers x experts)\n"
    "  --bench-model NAME     load benchmarks without a download: serve a synthetic full-size model (random\n"
    "                         Q4_K_M weights built on the device: 9B, 27B, 35B-A3B, 122B-A10B, 397B-A17B,\n"
    "                         9B-MoE, tiny-dense, tiny-moe) with the tokenizer and chat template of -m FILE.\n"
    "                         Its text is meaningless: an id past that vocabulary shows as the token id\n"
    "                         modulo its size, and requests run to max_tokens (no end-of-generation ids)\n";

namespace {

[[noreturn]] void bad_usage(const std::string& m) { throw std::invalid_argument(m); }

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) bad_usage(flag + ": '" + v + "' is not an integer");
  if (x < lo || x > hi) bad_usage(flag + ": " + v + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

}  // namespace

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) bad_usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << usage_text;
      std::exit(0);
    } else if (a == "-m" || a == "--model") {
      o.model_path = value();
    } else if (a == "--host") {
      o.host = value();
    } else if (a == "--port") {
      o.port = int(parse_int(a, value(), 0, 65535));
    } else if (a == "-np" || a == "--parallel") {
      o.n_parallel = int(parse_int(a, value(), 1, 4096));
    } else if (a == "-c" || a == "--ctx-size") {
      o.n_ctx = parse_int(a, value(), 1, int64_t(1) << 30);
    } else if (a == "-b" || a == "--batch-size") {
      o.n_batch = parse_int(a, value(), 1, 1 << 20);
    } else if (a == "--api-key") {
      o.api_key = value();
      if (o.api_key.empty()) bad_usage("--api-key: the key is empty");
    } else if (a == "-ctk" || a == "--cache-type-k" || a == "-ctv" || a == "--cache-type-v") {
      const std::string t = value();
      if (t != "f32" && t != "f16" && t != "bf16") bad_usage(a + ": '" + t + "' is not f32, f16 or bf16");
      (a == "-ctk" || a == "--cache-type-k" ? o.cache_type_k : o.cache_type_v) = t;
    } else if (a == "--timeout") {
      o.timeout_s = int(parse_int(a, value(), 1, 86400));
    } else if (a == "--queue") {
      o.max_queue = size_t(parse_int(a, value(), 1, 1 << 20));
    } else if (a == "--prefix-cache") {
      o.prefix_cache = int(parse_int(a, value(), 0, 4096));
    } else if (a == "--vram") {
      const std::string v = value();
      o.vram = gen::parse_memory_size(v);
      if (!o.vram)
        bad_usage(a + ": '" + v + "' is not a size in bytes with an optional K, M, G or T suffix (e.g. 24G)");
    } else if (a == "--expert-cache") {
      o.expert_cache = parse_int(a, value(), 0, 65536);
    } else if (a == "--expert-plan") {
      o.expert_plan = value();
      if (o.expert_plan->empty()) bad_usage(a + ": empty path");
    } else if (a == "--expert-stats" || a == "--expert-heatmap") {
      (a == "--expert-stats" ? o.expert_stats : o.expert_heatmap) = value();
    } else if (a == "--expert-window") {
      o.expert_window = int(parse_int(a, value(), 1, 65536));
    } else if (a == "--expert-rebalance") {
      o.expert_rebalance = int(parse_int(a, value(), 0, 1 << 20));
    } else if (a == "--expert-policy") {
      const std::string v = value();
      if (v != "frequency" && v != "lru") bad_usage(a + ": '" + v + "' is not frequency or lru");
      o.lru_experts = v == "lru";
    } else if (a == "--bench-model") {
      o.bench_model = value();
      if (!gen::find_synth_model(gen::synth_models(), o.bench_model))
        bad_usage(a + ": '" + o.bench_model + "' is not a synthetic model (" + gen::synth_model_keys() + ")");
    } else if (a == "--no-batch-invariant") {
      o.batch_invariant = false;
    } else if (a == "--batch-invariant-gemm") {
      o.batch_invariant_gemm = true;
    } else {
      bad_usage("unknown argument '" + a + "'");
    }
  }
  if (o.model_path.empty()) bad_usage("-m FILE is required");
  if (o.batch_invariant_gemm && !o.batch_invariant)
    bad_usage("--batch-invariant-gemm and --no-batch-invariant contradict each other");
  if (o.cache_type_k != o.cache_type_v)
    bad_usage("-ctk and -ctv must name the same type (the KV pool holds one element type)");
  if (size_t(o.n_parallel) + o.max_queue > max_held_requests)
    bad_usage("-np " + std::to_string(o.n_parallel) + " plus --queue " + std::to_string(o.max_queue) + " exceed the " +
              std::to_string(max_held_requests) + " requests the server holds at once (a connection thread each)");
  return o;
}

kv::kv_type to_kv_type(const std::string& t) {
  return t == "f32" ? kv::kv_type::f32 : t == "bf16" ? kv::kv_type::bf16 : kv::kv_type::f16;
}

}  // namespace q35::server
