// qwen35_server: an OpenAI-compatible HTTP server for Qwen3.5 GGUF files, the same composition as
// qwen35_generate (examples/common) behind the continuous-batching scheduler (scheduler.hpp) and the
// protocol layer (api.hpp). HTTP through cpp-httplib: one thread per connection from a pool, one thread
// stepping the decoder; a request's tokens travel from the stepping thread to its connection through a
// small channel, so a slow client never holds up a step.
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
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "api.hpp"
#include "decoder.hpp"
#include "device_model.hpp"
#include "expert_report.hpp"
#include "expert_trace.hpp"
#include "memory_plan.hpp"
#include "model_loader.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/stream_decoder.hpp"
#include "q35/io/tokenizer.hpp"
#include "scheduler.hpp"
#include "server_args.hpp"
#include "synth_model.hpp"

namespace {

using namespace q35;
namespace srv = q35::server;

// A request's ids on their way from the stepping thread to its connection thread.
struct channel {
  std::mutex m;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::optional<srv::finish_info> done;
};

// The text of a generation as its ids arrive: UTF-8 characters whole (io::stream_decoder). fold > 0
// (a synthetic model whose vocabulary is larger than the tokenizer's): ids are shown modulo fold.
struct text_stream {
  text_stream(const io::tokenizer& tok, int32_t fold_ids) : dec(tok, /*render_special=*/false), fold(fold_ids) {}
  io::stream_decoder dec;
  int32_t fold;
  std::string take(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += dec.push(fold > 0 ? id % fold : id);
    return s;
  }
};

// Counters the HTTP side adds to the scheduler's (for /metrics).
struct http_counters {
  std::atomic<int64_t> requests_http{0}, errors_4xx{0}, errors_5xx{0};
};

class server {
 public:
  server(const srv::options& opt, const io::tokenizer& tok, srv::scheduler& sched, std::string model_id, int64_t n_ctx,
         int64_t pages_total, int32_t fold_ids)
      : opt_(opt),
        tok_(tok),
        sched_(sched),
        model_id_(std::move(model_id)),
        n_ctx_(n_ctx),
        pages_total_(pages_total),
        fold_ids_(fold_ids) {
    limits_.max_tokens = n_ctx;
    created_ = int64_t(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  }

  void routes(httplib::Server& http) {
    http.set_payload_max_length(limits_.max_body_bytes);
    http.set_read_timeout(opt_.timeout_s, 0);
    http.set_write_timeout(opt_.timeout_s, 0);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      ++counters_.requests_http;
      if (opt_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (srv::check_bearer(req.get_header_value("Authorization"), opt_.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      error(res, {401, "authentication_error", "invalid or missing API key (Authorization: Bearer KEY)", ""});
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own error body
      if (res.status == 404)
        error(res, {404, "not_found_error", "no route for " + req.method + " " + req.path, ""});
      else if (res.status == 413)
        error(res, {413, "invalid_request_error",
                    "the request body is over " + std::to_string(limits_.max_body_bytes) + " bytes", ""});
      else
        error(res, {res.status, "invalid_request_error", "HTTP " + std::to_string(res.status), ""});
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      error(res, {500, "server_error", what, ""});
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const std::vector<std::string> ids{model_id_};
      res.set_content(srv::models_body(ids, created_), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });
  }

 private:
  void error(httplib::Response& res, const srv::api_error& e) {
    (e.status >= 500 ? counters_.errors_5xx : counters_.errors_4xx)++;
    res.status = e.status;
    res.set_content(srv::error_body(e), "application/json");
  }

  // Tokens, the scheduler's refusal as an HTTP error, or a started request.
  struct started {
    std::shared_ptr<channel> ch;
    srv::request_handle handle;
    int64_t prompt_tokens = 0;
  };
  // `field`: where the prompt came from ("messages", "prompt"), for the error's param.
  std::optional<started> start(httplib::Response& res, const std::string& prompt, const char* field,
                               const srv::sampling_options& s, std::optional<int64_t> max_tokens) {
    std::vector<int32_t> ids;
    try {
      ids = tok_.encode(prompt, /*parse_special=*/true);
    } catch (const std::exception& e) {
      error(res, {400, "invalid_request_error", std::string("the prompt cannot be tokenized: ") + e.what(), ""});
      return std::nullopt;
    }
    if (ids.empty()) {
      error(res, {400, "invalid_request_error", "the prompt is empty (no tokens)", field});
      return std::nullopt;
    }
    if (int64_t(ids.size()) >= n_ctx_) {
      error(res, {400, "invalid_request_error",
                  "the prompt has " + std::to_string(ids.size()) + " tokens; the context holds " +
                      std::to_string(n_ctx_) + " (the prompt and at least one generated token)",
                  field});
      return std::nullopt;
    }
    auto ch = std::make_shared<channel>();
    srv::request r;
    r.prompt = ids;
    r.sampling.temperature = s.temperature, r.sampling.top_k = s.top_k, r.sampling.top_p = s.top_p;
    r.sampling.min_p = s.min_p, r.sampling.repeat_penalty = s.repeat_penalty;
    r.sampling.repeat_last_n = s.repeat_last_n;
    r.sampling.seed = s.seed ? *s.seed : std::random_device{}() * uint64_t(0x9e3779b97f4a7c15ull) + next_seed_++;
    r.max_tokens = max_tokens ? *max_tokens : n_ctx_ - int64_t(ids.size());
    r.on_token = [ch](int32_t id) {
      std::lock_guard<std::mutex> lock(ch->m);
      ch->ids.push_back(id);
      ch->cv.notify_all();
    };
    r.on_done = [ch](const srv::finish_info& f) {
      std::lock_guard<std::mutex> lock(ch->m);
      ch->done = f;
      ch->cv.notify_all();
    };
    srv::submit_result sub = sched_.submit(std::move(r));
    if (!sub.ok()) {
      if (sub.error == srv::submit_error::queue_full) {
        res.set_header("Retry-After", "1");
        error(res, {503, "server_overloaded", sub.message, ""});
      } else {
        error(res, {400, "invalid_request_error", sub.message, ""});
      }
      return std::nullopt;
    }
    return started{ch, sub.handle, int64_t(ids.size())};
  }

  // Waits for new ids (or the end) for up to `wait`; returns them, and the end once it has come.
  static std::vector<int32_t> next_ids(channel& ch, std::chrono::milliseconds wait,
                                       std::optional<srv::finish_info>& done) {
    std::unique_lock<std::mutex> lock(ch.m);
    ch.cv.wait_for(lock, wait, [&] { return !ch.ids.empty() || ch.done.has_value(); });
    std::vector<int32_t> out;
    out.swap(ch.ids);
    if (ch.done && out.empty()) done = ch.done;  // the end only after every id before it
    return out;
  }

  // The finish reason of an ended request; an error outcome throws (500).
  static srv::finish_reason reason_of(const srv::finish_info& f, bool stopped_by_string) {
    if (f.reason == srv::outcome::error) throw std::runtime_error("generation failed: " + f.error);
    if (stopped_by_string) return srv::finish_reason::stop;
    return f.reason == srv::outcome::length ? srv::finish_reason::length : srv::finish_reason::stop;
  }

  srv::response_meta meta(const char* prefix, const std::string& model) const {
    return {
        srv::new_id(prefix),
        int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                    .count()),
        model.empty() ? model_id_ : model};
  }

  // The whole text of a non-streamed request; ends it early when a stop string has come.
  std::string collect(started& s, const std::vector<std::string>& stop, srv::finish_info& fin, bool& stopped) {
    text_stream ts(tok_, fold_ids_);
    std::string text;
    std::optional<srv::finish_info> done;
    while (!done) {
      const auto ids = next_ids(*s.ch, std::chrono::milliseconds(1000), done);
      text += ts.take(ids);
      if (!stopped && srv::find_stop(text, stop)) {
        stopped = true;
        s.handle.cancel();  // the rest would be cut anyway
      }
    }
    text += ts.dec.flush();
    fin = *done;
    return text;
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    auto parsed = srv::parse_chat_request(req.body, limits_);
    if (auto* e = std::get_if<srv::api_error>(&parsed)) return error(res, *e);
    const srv::chat_request cr = std::get<srv::chat_request>(std::move(parsed));
    auto st = start(res, cr.prompt, "messages", cr.sampling, cr.max_tokens);
    if (!st) return;
    if (!cr.stream) {
      srv::finish_info fin;
      bool stopped = false;
      const std::string text = collect(*st, cr.output.stop, fin, stopped);
      const srv::parsed_output out = srv::parse_output(text, cr.output);
      const srv::finish_reason why = reason_of(fin, stopped || out.stopped);
      res.set_content(
          srv::chat_completion_body(meta("chatcmpl-", cr.model), out, why, {st->prompt_tokens, fin.completion_tokens}),
          "application/json");
      return;
    }
    stream(res, std::move(*st), cr.output, srv::chat_stream(meta("chatcmpl-", cr.model), cr.include_usage));
  }

  void completion(const httplib::Request& req, httplib::Response& res) {
    auto parsed = srv::parse_completion_request(req.body, limits_);
    if (auto* e = std::get_if<srv::api_error>(&parsed)) return error(res, *e);
    const srv::completion_request cr = std::get<srv::completion_request>(std::move(parsed));
    auto st = start(res, cr.prompt, "prompt", cr.sampling, cr.max_tokens);
    if (!st) return;
    if (!cr.stream) {
      srv::finish_info fin;
      bool stopped = false;
      std::string text = collect(*st, cr.stop, fin, stopped);
      if (const auto cut = srv::find_stop(text, cr.stop)) text.resize(*cut), stopped = true;
      const srv::finish_reason why = reason_of(fin, stopped);
      res.set_content(
          srv::completion_body(meta("cmpl-", cr.model), text, why, {st->prompt_tokens, fin.completion_tokens}),
          "application/json");
      return;
    }
    srv::output_options plain;
    plain.stop = cr.stop;
    stream(res, std::move(*st), plain,
           completion_frames{srv::completion_stream(meta("cmpl-", cr.model), cr.include_usage)});
  }

  // completion_stream in chat_stream's shape: no opening frame, deltas of text only.
  struct completion_frames {
    srv::completion_stream frames;
    std::string begin() const { return {}; }
    std::string delta(const srv::stream_delta& d) const { return frames.delta(d.text); }
    std::string end(srv::finish_reason why, const srv::usage_info& u) const { return frames.end(why, u); }
  };

  // A streamed response: `frames` (begin, delta, end: chat_stream or completion_frames) turn the
  // splitter's deltas into server-sent events as the ids arrive. A stop string, or a client that has
  // gone (a failed write, or the connection's end before the request's), cancels the request.
  template <class Frames>
  void stream(httplib::Response& res, started st, const srv::output_options& out_opt, Frames frames) {
    struct stream_state {
      started s;
      text_stream text;
      srv::stream_splitter split;
      Frames frames;
      bool begun = false;
      bool finished = false;
    };
    auto ss = std::make_shared<stream_state>(
        stream_state{std::move(st), text_stream(tok_, fold_ids_), srv::stream_splitter(out_opt), std::move(frames)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [ss](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!ss->begun) {
            ss->begun = true;
            out = ss->frames.begin();
          }
          std::optional<srv::finish_info> done;
          const auto ids = next_ids(*ss->s.ch, std::chrono::milliseconds(1000), done);
          auto emit = [&](const std::vector<srv::stream_delta>& ds) {
            for (const srv::stream_delta& d : ds) out += ss->frames.delta(d);
          };
          if (!ids.empty() && !ss->split.stopped()) {
            emit(ss->split.feed(ss->text.take(ids)));
            if (ss->split.stopped()) ss->s.handle.cancel();
          }
          if (done) {
            if (!ss->split.stopped()) emit(ss->split.feed(ss->text.dec.flush()));
            emit(ss->split.finish());
            if (done->reason == srv::outcome::error) {
              // the stream has begun: the error goes in-band, as OpenAI's streams carry it
              out += srv::sse_event(srv::error_body({500, "server_error", "generation failed: " + done->error, ""}));
              out += std::string(srv::sse_done);
            } else {
              out +=
                  ss->frames.end(reason_of(*done, ss->split.stopped()), {ss->s.prompt_tokens, done->completion_tokens});
            }
            ss->finished = true;
            if (!sink.write(out.data(), out.size())) return false;
            sink.done();
            return true;
          }
          if (out.empty()) out = ": keep-alive\n\n";  // an SSE comment: finds a client that has gone
          return sink.write(out.data(), out.size());
        },
        [ss](bool) {
          // the connection is over: a request still running lost its client
          if (!ss->finished) ss->s.handle.cancel();
        });
  }

  std::string metrics_text() const {
    const srv::scheduler_metrics m = sched_.metrics();
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << value << '\n';
    };
    o << "# HELP q35_requests_total Generation requests by how they ended (or were refused).\n"
         "# TYPE q35_requests_total counter\n"
      << "q35_requests_total{outcome=\"finished\"} " << m.requests_finished << '\n'
      << "q35_requests_total{outcome=\"cancelled\"} " << m.requests_cancelled << '\n'
      << "q35_requests_total{outcome=\"failed\"} " << m.requests_failed << '\n'
      << "q35_requests_total{outcome=\"rejected\"} " << m.requests_rejected << '\n';
    metric("q35_requests_submitted_total", "counter", "Generation requests accepted by the scheduler.",
           m.requests_submitted);
    metric("q35_http_requests_total", "counter", "HTTP requests received.", counters_.requests_http.load());
    metric("q35_http_errors_4xx_total", "counter", "Responses with a 4xx status.", counters_.errors_4xx.load());
    metric("q35_http_errors_5xx_total", "counter", "Responses with a 5xx status.", counters_.errors_5xx.load());
    metric("q35_prompt_tokens_total", "counter", "Prompt tokens fed to the decoder.", m.tokens_prompt);
    metric("q35_generated_tokens_total", "counter", "Tokens generated.", m.tokens_generated);
    const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
    metric("q35_generated_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.",
           m.tokens_per_second_recent);
    metric("q35_generated_tokens_per_second_average", "gauge", "Tokens generated per second since the server started.",
           up > 0 ? double(m.tokens_generated) / up : 0.0);
    metric("q35_decoder_steps_total", "counter", "Decoder steps run.", m.steps);
    metric("q35_queue_length", "gauge", "Requests waiting for a sequence.", m.queue_length);
    metric("q35_active_sequences", "gauge", "Sequences being decoded.", m.active_sequences);
    metric("q35_kv_pages_used", "gauge", "KV cache pages in use.", m.kv_pages_used);
    metric("q35_kv_pages_total", "gauge", "KV cache pages of the pool.", pages_total_);
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
      o << "# HELP q35_expert_selections_total Routed-expert selections by where the weights were read.\n"
           "# TYPE q35_expert_selections_total counter\n"
        << "q35_expert_selections_total{source=\"slot\"} " << m.expert_hits << '\n'
        << "q35_expert_selections_total{source=\"host\"} " << m.expert_misses << '\n'
        << "q35_expert_selections_total{source=\"staged\"} " << m.expert_staged << '\n';
      metric("q35_expert_host_bytes_total", "counter", "Bytes read or copied from host memory for routed experts.",
             m.expert_host_bytes);
      metric("q35_expert_promotions_total", "counter", "Routed experts copied into device slots.", m.expert_promotions);
    }
    return o.str();
  }

  const srv::options& opt_;
  const io::tokenizer& tok_;
  srv::scheduler& sched_;
  std::string model_id_;
  int64_t n_ctx_;
  int64_t pages_total_;
  int32_t fold_ids_;  // text_stream's fold (synthetic models), else 0
  int64_t created_ = 0;
  srv::api_limits limits_;
  http_counters counters_;
  std::atomic<uint64_t> next_seed_{1};
  std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();
};

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
  cfg.n_prefix_slots = opt.prefix_cache;
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
  server s(opt, tok, sched, synth ? synth->key : base_name(opt.model_path), n_ctx, dec.pages_total(), fold);
  s.routes(http);
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
            << " MiB; listening on http://" << opt.host << ':' << port << std::endl;

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
