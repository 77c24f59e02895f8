#include "http_api.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api.hpp"
#include "metrics.hpp"
#include "q35/io/stream_decoder.hpp"

namespace q35::server {

namespace {

// A request's ids on their way from the stepping thread to its connection thread.
struct channel {
  std::mutex m;
  std::condition_variable cv;
  std::vector<int32_t> ids;
  std::optional<finish_info> done;
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

}  // namespace

class http_api::impl {
 public:
  impl(const options& opt, const io::tokenizer& tok, scheduler& sched, served_model model)
      : opt_(opt),
        tok_(tok),
        sched_(sched),
        model_id_(std::move(model.id)),
        n_ctx_(model.n_ctx),
        fold_ids_(model.fold_ids) {
    limits_.max_tokens = n_ctx_;
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
      if (check_bearer(req.get_header_value("Authorization"), opt_.api_key))
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
      res.set_content(models_body(ids, created_), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
      res.set_content(metrics_text(sched_.metrics(), counters_, up), "text/plain; version=0.0.4");
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });
  }

 private:
  void error(httplib::Response& res, const api_error& e) {
    (e.status >= 500 ? counters_.errors_5xx : counters_.errors_4xx)++;
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
  }

  // Tokens, the scheduler's refusal as an HTTP error, or a started request.
  struct started {
    std::shared_ptr<channel> ch;
    request_handle handle;
    int64_t prompt_tokens = 0;
  };
  // `field`: where the prompt came from ("messages", "prompt"), for the error's param.
  std::optional<started> start(httplib::Response& res, const std::string& prompt, const char* field,
                               const sampling_options& s, std::optional<int64_t> max_tokens) {
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
    request r;
    r.prompt = ids;
    r.sampling.temperature = s.temperature, r.sampling.top_k = s.top_k, r.sampling.top_p = s.top_p;
    r.sampling.min_p = s.min_p, r.sampling.repeat_penalty = s.repeat_penalty;
    r.sampling.frequency_penalty = s.frequency_penalty, r.sampling.presence_penalty = s.presence_penalty;
    r.sampling.repeat_last_n = s.repeat_last_n;
    for (const auto& [id, b] : s.logit_bias) r.logit_bias.push_back({id, b});
    r.sampling.seed = s.seed ? *s.seed : std::random_device{}() * uint64_t(0x9e3779b97f4a7c15ull) + next_seed_++;
    r.max_tokens = max_tokens ? *max_tokens : n_ctx_ - int64_t(ids.size());
    r.on_token = [ch](int32_t id) {
      std::lock_guard<std::mutex> lock(ch->m);
      ch->ids.push_back(id);
      ch->cv.notify_all();
    };
    r.on_done = [ch](const finish_info& f) {
      std::lock_guard<std::mutex> lock(ch->m);
      ch->done = f;
      ch->cv.notify_all();
    };
    submit_result sub = sched_.submit(std::move(r));
    if (!sub.ok()) {
      if (sub.error == submit_error::queue_full) {
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
  static std::vector<int32_t> next_ids(channel& ch, std::chrono::milliseconds wait, std::optional<finish_info>& done) {
    std::unique_lock<std::mutex> lock(ch.m);
    ch.cv.wait_for(lock, wait, [&] { return !ch.ids.empty() || ch.done.has_value(); });
    std::vector<int32_t> out;
    out.swap(ch.ids);
    if (ch.done && out.empty()) done = ch.done;  // the end only after every id before it
    return out;
  }

  // The finish reason of an ended request; an error outcome throws (500).
  static finish_reason reason_of(const finish_info& f, bool stopped_by_string) {
    if (f.reason == outcome::error) throw std::runtime_error("generation failed: " + f.error);
    if (stopped_by_string) return finish_reason::stop;
    return f.reason == outcome::length ? finish_reason::length : finish_reason::stop;
  }

  response_meta meta(const char* prefix, const std::string& model) const {
    return {
        new_id(prefix),
        int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                    .count()),
        model.empty() ? model_id_ : model};
  }

  // The whole text of a non-streamed request; ends it early when a stop string has come.
  std::string collect(started& s, const std::vector<std::string>& stop, finish_info& fin, bool& stopped) {
    text_stream ts(tok_, fold_ids_);
    std::string text;
    std::optional<finish_info> done;
    while (!done) {
      const auto ids = next_ids(*s.ch, std::chrono::milliseconds(1000), done);
      text += ts.take(ids);
      if (!stopped && find_stop(text, stop)) {
        stopped = true;
        s.handle.cancel();  // the rest would be cut anyway
      }
    }
    text += ts.dec.flush();
    fin = *done;
    return text;
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    auto parsed = parse_chat_request(req.body, limits_);
    if (auto* e = std::get_if<api_error>(&parsed)) return error(res, *e);
    const chat_request cr = std::get<chat_request>(std::move(parsed));
    auto st = start(res, cr.prompt, "messages", cr.sampling, cr.max_tokens);
    if (!st) return;
    if (!cr.stream) {
      finish_info fin;
      bool stopped = false;
      const std::string text = collect(*st, cr.output.stop, fin, stopped);
      const parsed_output out = parse_output(text, cr.output);
      const finish_reason why = reason_of(fin, stopped || out.stopped);
      res.set_content(
          chat_completion_body(meta("chatcmpl-", cr.model), out, why, {st->prompt_tokens, fin.completion_tokens}),
          "application/json");
      return;
    }
    stream(res, std::move(*st), cr.output, chat_stream(meta("chatcmpl-", cr.model), cr.include_usage));
  }

  void completion(const httplib::Request& req, httplib::Response& res) {
    auto parsed = parse_completion_request(req.body, limits_);
    if (auto* e = std::get_if<api_error>(&parsed)) return error(res, *e);
    const completion_request cr = std::get<completion_request>(std::move(parsed));
    auto st = start(res, cr.prompt, "prompt", cr.sampling, cr.max_tokens);
    if (!st) return;
    if (!cr.stream) {
      finish_info fin;
      bool stopped = false;
      std::string text = collect(*st, cr.stop, fin, stopped);
      if (const auto cut = find_stop(text, cr.stop)) text.resize(*cut), stopped = true;
      const finish_reason why = reason_of(fin, stopped);
      res.set_content(completion_body(meta("cmpl-", cr.model), text, why, {st->prompt_tokens, fin.completion_tokens}),
                      "application/json");
      return;
    }
    output_options plain;
    plain.stop = cr.stop;
    stream(res, std::move(*st), plain, completion_frames{completion_stream(meta("cmpl-", cr.model), cr.include_usage)});
  }

  // completion_stream in chat_stream's shape: no opening frame, deltas of text only.
  struct completion_frames {
    completion_stream frames;
    std::string begin() const { return {}; }
    std::string delta(const stream_delta& d) const { return frames.delta(d.text); }
    std::string end(finish_reason why, const usage_info& u) const { return frames.end(why, u); }
  };

  // A streamed response: `frames` (begin, delta, end: chat_stream or completion_frames) turn the
  // splitter's deltas into server-sent events as the ids arrive. A stop string, or a client that has
  // gone (a failed write, or the connection's end before the request's), cancels the request.
  template <class Frames>
  void stream(httplib::Response& res, started st, const output_options& out_opt, Frames frames) {
    struct stream_state {
      started s;
      text_stream text;
      stream_splitter split;
      Frames frames;
      bool begun = false;
      bool finished = false;
    };
    auto ss = std::make_shared<stream_state>(
        stream_state{std::move(st), text_stream(tok_, fold_ids_), stream_splitter(out_opt), std::move(frames)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [ss](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!ss->begun) {
            ss->begun = true;
            out = ss->frames.begin();
          }
          std::optional<finish_info> done;
          const auto ids = next_ids(*ss->s.ch, std::chrono::milliseconds(1000), done);
          auto emit = [&](const std::vector<stream_delta>& ds) {
            for (const stream_delta& d : ds) out += ss->frames.delta(d);
          };
          if (!ids.empty() && !ss->split.stopped()) {
            emit(ss->split.feed(ss->text.take(ids)));
            if (ss->split.stopped()) ss->s.handle.cancel();
          }
          if (done) {
            if (!ss->split.stopped()) emit(ss->split.feed(ss->text.dec.flush()));
            emit(ss->split.finish());
            if (done->reason == outcome::error) {
              // the stream has begun: the error goes in-band, as OpenAI's streams carry it
              out += sse_event(error_body({500, "server_error", "generation failed: " + done->error, ""}));
              out += std::string(sse_done);
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

  const options& opt_;
  const io::tokenizer& tok_;
  scheduler& sched_;
  std::string model_id_;
  int64_t n_ctx_;
  int32_t fold_ids_;  // text_stream's fold (synthetic models), else 0
  int64_t created_ = 0;
  api_limits limits_;
  http_counters counters_;
  std::atomic<uint64_t> next_seed_{1};
  std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();
};

http_api::http_api(const options& opt, const io::tokenizer& tok, scheduler& sched, served_model model)
    : impl_(std::make_unique<impl>(opt, tok, sched, std::move(model))) {}

http_api::~http_api() = default;

void http_api::routes(httplib::Server& http) { impl_->routes(http); }

}  // namespace q35::server
