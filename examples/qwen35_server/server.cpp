// qwen35_server: an OpenAI-compatible HTTP server for Qwen3.5 GGUF files, the same composition as
// qwen35_generate (examples/common) behind the continuous-batching scheduler (scheduler.hpp), the
// routes (http_api.hpp) and the protocol layer (api.hpp). HTTP through cpp-httplib: one thread per
// connection from a pool, one thread stepping the decoder. This file loads the model, plans its
// memory, starts the scheduler and serves until SIGINT / SIGTERM.
//
//   qwen35_server -m model.gguf [--host 127.0.0.1] [--port 8080] [-np 4] [-c 4096] [-b 512]
//                 [--api-key KEY] [-ctk f16 -ctv f16] [--timeout 600] [--queue 64] [--prefix-cache 16]
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions (both with stream: true as server-sent
// events), GET /v1/models, GET /health, GET /metrics (Prometheus text). With --api-key every endpoint
// but /health needs "Authorization: Bearer KEY" (401 otherwise). Errors are OpenAI's JSON error body.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "decoder.hpp"
#include "device_model.hpp"
#include "expert_report.hpp"
#include "expert_trace.hpp"
#include "http_api.hpp"
#include "memory_plan.hpp"
#include "model_loader.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/tokenizer.hpp"
#include "scheduler.hpp"
#include "server_args.hpp"
#include "synth_model.hpp"

namespace {

using namespace q35;
namespace srv = q35::server;

void check(const status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.to_string());
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", double(bytes) / (1 << 20));
  return buf;
}

int run(const srv::options& opt) {
  // SIGINT / SIGTERM end the server through a thread that waits for them (no work in a signal handler)
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that disconnects mid-write is a failed write, not a signal

  const auto file = io::gguf_file::open(opt.model_path);
  std::string matched;
  const io::bound_model bound = cli::bind_any_model(file, matched);
  const io::tokenizer tok = io::tokenizer::from_gguf(file);
  check(gen::check_supported(bound.hparams), file.path());
  // --bench-model: a synthetic model of that shape, with -m's tokenizer and template
  const std::vector<gen::synth_entry> synth_all = gen::synth_models();
  const gen::synth_entry* synth = opt.bench_model.empty() ? nullptr : gen::find_synth_model(synth_all, opt.bench_model);
  const io::model_hparams& h = synth ? synth->h : bound.hparams;
  if (synth && uint32_t(tok.n_vocab()) > h.n_vocab)
    throw std::invalid_argument("--bench-model " + synth->key + ": its vocabulary has " + std::to_string(h.n_vocab) +
                                " tokens, fewer than the " + std::to_string(tok.n_vocab()) + " of " + opt.model_path +
                                "'s tokenizer (prompts could name tokens the model does not have)");
  const int64_t model_ctx = h.context_length;
  const int64_t n_ctx = opt.n_ctx ? *opt.n_ctx : std::min<int64_t>(4096, model_ctx);
  if (n_ctx > model_ctx)
    throw std::invalid_argument("-c " + std::to_string(n_ctx) + " exceeds the model's context length " +
                                std::to_string(model_ctx) + " (" + bound.hparams.arch + ".context_length)");
  for (const auto& [flag, given] :
       {std::pair{"--expert-cache", bool(opt.expert_cache)}, std::pair{"--expert-window", bool(opt.expert_window)},
        std::pair{"--expert-rebalance", bool(opt.expert_rebalance)}})
    if (given && h.count(models::ffn_type::moe) == 0)
      throw std::invalid_argument(std::string(flag) + ": " + (synth ? synth->key : opt.model_path) +
                                  " has no MoE layers");
  std::optional<std::vector<std::vector<uint64_t>>> trace;  // --expert-plan
  if (opt.expert_plan) {
    if (synth) throw std::invalid_argument("--expert-plan places a traced model file's experts, not --bench-model's");
    if (h.count(models::ffn_type::moe) == 0)
      throw std::invalid_argument("--expert-plan: " + opt.model_path + " has no MoE layers");
    trace.emplace();
    if (const status st = gen::read_expert_trace(*opt.expert_plan, h, *trace); !st.ok())
      throw std::invalid_argument(st.message());
  }
  // the served workload's trace (--expert-stats, --expert-heatmap): paths checked before the model loads
  std::vector<std::pair<std::string, std::string>> trace_files;
  if (opt.expert_stats) trace_files.emplace_back("--expert-stats", *opt.expert_stats);
  if (opt.expert_heatmap) trace_files.emplace_back("--expert-heatmap", *opt.expert_heatmap);
  for (const auto& [flag, path] : trace_files) {
    if (const std::string bad = gen::check_output_path(flag, path); !bad.empty()) throw std::invalid_argument(bad);
    if (h.count(models::ffn_type::moe) == 0)
      throw std::invalid_argument(flag + ": " + (synth ? synth->key : opt.model_path) +
                                  " has no MoE layers (no expert selections to trace)");
  }
  gen::decoder_config cfg;
  cfg.expert_stats = !trace_files.empty();
  cfg.n_ctx = n_ctx, cfg.n_seq_max = opt.n_parallel, cfg.kv_type = srv::to_kv_type(opt.cache_type_k);
  cfg.n_batch = std::min(opt.n_batch, n_ctx), cfg.batch_invariant = opt.batch_invariant;
  cfg.batch_invariant_gemm = opt.batch_invariant_gemm;
  cfg.n_prefix_slots = opt.prefix_cache;
  // echo with logprobs: the prompt's rows through the LM head 32 at a time (32 x n_vocab floats: 32 MB
  // for a 248,320-token vocabulary), each slice reduced to its answers on the device
  cfg.score_rows = 32;
  if (opt.lru_experts) cfg.expert_cache_policy = gen::expert_policy::lru;
  if (opt.expert_window) cfg.expert_staging_window = *opt.expert_window;
  if (opt.expert_rebalance) cfg.expert_rebalance_steps = *opt.expert_rebalance;
  // the memory plan (gen::plan_memory): every routed expert on the device if all fit, else slots
  gen::memory_plan plan;
  const uint64_t budget = opt.vram ? *opt.vram : gen::default_memory_budget();
  check(synth ? gen::plan_synth_memory(h, synth->tied, cfg, budget, opt.expert_cache, plan)
              : gen::plan_memory(file, bound.hparams, bound.weights, cfg, budget, opt.expert_cache, plan,
                                 trace ? &*trace : nullptr),
        opt.vram ? "--vram " + gen::format_bytes(*opt.vram) : std::string("the device's free memory"));
  if (opt.vram || plan.host_experts()) std::cerr << "qwen35_server: memory plan: " << plan.describe() << std::endl;
  gen::device_model model;
  gen::synth_model synth_model;
  if (synth) {
    check(synth_model.build(h, synth->tied, 0x9e3779b97f4a7c15ull, nullptr, plan.slots), "building " + synth->name);
    matched = synth->name + " (synthetic: random Q4_K_M weights; tokenizer and template of " + matched + ")";
  } else {
    check(plan.host_experts() ? model.load(file, bound, {}, plan.placement()) : model.load(file, bound),
          "loading " + opt.model_path);
  }
  gen::decoder dec;
  check(dec.init(synth ? synth_model.model() : model, cfg), "setting up the decoder");

  srv::scheduler sched;
  srv::scheduler_config sc;
  sc.max_queue = opt.max_queue, sc.n_batch = cfg.n_batch, sc.prompt_budget = cfg.n_batch;
  sc.n_vocab = int32_t(h.n_vocab);
  if (!synth) sc.stop_ids = tok.eog_ids();  // synthetic weights: every request runs to max_tokens
  if (const std::optional<int32_t> im_start = tok.find("<|im_start|>")) sc.prefix_boundary_ids = {*im_start};
  check(sched.init(dec, sc), "setting up the scheduler");
  check(sched.run(), "starting the scheduler");

  httplib::Server http;
  // A connection holds a pool thread while its request runs or waits for a sequence: the pool has one
  // for every request the scheduler may hold (-np running, --queue waiting) and spares for the ones
  // answered at once (/health, /metrics, 503 past the queue, 4xx). With fewer, requests past the pool
  // waited for a thread instead of getting their 503, and so did /health.
  const size_t n_threads = size_t(opt.n_parallel) + opt.max_queue + srv::spare_http_threads;
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  const int32_t fold = synth && h.n_vocab > uint32_t(tok.n_vocab()) ? tok.n_vocab() : 0;
  srv::http_api api(opt, tok, sched, {synth ? synth->key : base_name(opt.model_path), n_ctx, fold});
  api.routes(http);
  // cpp-httplib (Debian's is a compiled library) listens with a backlog of 5: a burst of clients
  // connecting at once (the load benchmark's 32 or 64) overflowed the accept queue, and some of those
  // connections were reset (the clients saw read errors). Listening again on the bound socket raises
  // the backlog (Linux; the kernel caps it at net.core.somaxconn).
  socket_t listen_fd = INVALID_SOCKET;
  http.set_socket_options([&](socket_t fd) {
    httplib::default_socket_options(fd);
    listen_fd = fd;  // the last socket made is the one that bound
  });
  const int port =
      opt.port == 0 ? http.bind_to_any_port(opt.host) : (http.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (port < 0) throw std::runtime_error("cannot listen on " + opt.host + ":" + std::to_string(opt.port));
  if (listen_fd == INVALID_SOCKET || ::listen(listen_fd, SOMAXCONN) != 0)
    std::cerr << "qwen35_server: warning: could not raise the listen backlog; bursts of connections may be refused\n";
  std::cout << "qwen35_server: " << matched << ", " << opt.n_parallel << " sequences, " << n_ctx
            << " tokens of KV pool, " << opt.prefix_cache << " prefix checkpoints of " << mib(dec.recurrent_bytes())
            << " MiB, batch invariance "
            << (!opt.batch_invariant       ? "off"
                : opt.batch_invariant_gemm ? "on the GEMM (decode groups of up to 64)"
                                           : "on (decode groups of up to 8)")
            << "; listening on http://" << opt.host << ':' << port << std::endl;

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    http.stop();
  });
  const bool ok = http.listen_after_bind();
  // listen returns on stop() (a signal) or an error: wake the waiter if it still waits, then shut down
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  sched.stop();
  if (!trace_files.empty()) {
    // every request's selections; the server has no adaptive top-k, so each token fed counts k per layer
    gen::expert_report r;
    r.model =
        synth ? synth->name : (file.has("general.name") ? file.get_string("general.name") : base_name(opt.model_path));
    r.arch = h.arch, r.n_experts = int(h.n_experts), r.n_experts_used = int(h.n_experts_used);
    check(gen::fill_expert_report(dec, r), "reading the expert statistics");
    uint64_t first_layer = 0;
    for (const uint64_t c : r.counts.empty() ? std::vector<uint64_t>{} : r.counts[0]) first_layer += c;
    r.tokens = int64_t(first_layer / std::max<uint64_t>(1, h.n_experts_used));
    for (const auto& [flag, path] : trace_files) {
      gen::write_output(flag, path, flag == "--expert-stats" ? gen::expert_report_json(r) : gen::expert_heatmap_svg(r));
      std::cout << "qwen35_server: " << flag << " written to " << path << std::endl;
    }
  }
  std::cout << "qwen35_server: stopped" << std::endl;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  srv::options opt;
  try {
    opt = srv::parse_args(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "qwen35_server: " << e.what() << "\n" << srv::usage_text;
    return 1;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::cerr << "qwen35_server: " << e.what() << std::endl;
    return 1;
  }
}
