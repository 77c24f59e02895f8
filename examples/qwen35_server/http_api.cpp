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
#include "http_choice.hpp"
#include "metrics.hpp"

namespace q35::server {

using detail::channel;
using detail::has_news;
using detail::logprob_track;
using detail::take;
using detail::taken;
using detail::text_stream;

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

  // A request's choices, started: a slot of the channel and a scheduler request each, choice p x n + i
  // for prompt p.
  struct started {
    std::shared_ptr<channel> ch;
    std::vector<request_handle> handles;    // per choice
    std::vector<std::vector<int32_t>> ids;  // per choice: its prompt's
    int64_t prompt_tokens = 0;              // usage: each prompt once
    size_t size() const { return handles.size(); }
    void cancel_all() const {
      for (const request_handle& h : handles) h.cancel();  // (no effect on the ended ones)
    }
  };
  // The prompt as its tokens render (special tokens as their text): an echo's text, whose bytes the
  // logprobs' offsets count (for a text prompt, the prompt as given).
  std::string rendered(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) out += tok_.piece(fold_ids_ > 0 ? id % fold_ids_ : id, true);
    return out;
  }

  // Tokenizes and checks every prompt, then submits n requests per prompt (choice i with seed + i when
  // a seed is given). A refusal is an HTTP error (nothing stays submitted); else the started choices.
  // `field`: where the prompts came from ("messages", "prompt"), for the error's param.
  std::optional<started> start(httplib::Response& res, const std::vector<prompt_input>& prompts, const char* field,
                               const sampling_options& s, std::optional<int64_t> max_tokens,
                               std::optional<int> top_logprobs, int n, int prompt_logprobs = -1) {
    std::vector<std::vector<int32_t>> tokens;
    for (size_t p = 0; p < prompts.size(); ++p) {
      const std::string which = prompts.size() > 1 ? "prompt " + std::to_string(p) : "the prompt";
      std::vector<int32_t> ids = prompts[p].ids;
      try {
        if (ids.empty()) ids = tok_.encode(prompts[p].text, /*parse_special=*/true);
      } catch (const std::exception& e) {
        error(res, {400, "invalid_request_error", which + " cannot be tokenized: " + e.what(), ""});
        return std::nullopt;
      }
      if (ids.empty()) {
        error(res, {400, "invalid_request_error", which + " is empty (no tokens)", field});
        return std::nullopt;
      }
      if (int64_t(ids.size()) >= n_ctx_) {
        error(res, {400, "invalid_request_error",
                    which + " has " + std::to_string(ids.size()) + " tokens; the context holds " +
                        std::to_string(n_ctx_) + " (the prompt and at least one generated token)",
                    field});
        return std::nullopt;
      }
      tokens.push_back(std::move(ids));
    }
    started st;
    st.ch = std::make_shared<channel>();
    st.ch->slots.resize(tokens.size() * size_t(n));
    const uint64_t base_seed =
        s.seed ? *s.seed : std::random_device{}() * uint64_t(0x9e3779b97f4a7c15ull) + next_seed_++;
    for (size_t p = 0; p < tokens.size(); ++p) {
      st.prompt_tokens += int64_t(tokens[p].size());
      for (int i = 0; i < n; ++i) {
        const size_t k = st.handles.size();
        request r;
        r.prompt = tokens[p];
        r.sampling.temperature = s.temperature, r.sampling.top_k = s.top_k, r.sampling.top_p = s.top_p;
        r.sampling.min_p = s.min_p, r.sampling.repeat_penalty = s.repeat_penalty;
        r.sampling.frequency_penalty = s.frequency_penalty, r.sampling.presence_penalty = s.presence_penalty;
        r.sampling.repeat_last_n = s.repeat_last_n;
        r.sampling.seed = base_seed + uint64_t(i);
        for (const auto& [id, b] : s.logit_bias) r.logit_bias.push_back({id, b});
        r.top_logprobs = top_logprobs.value_or(-1);
        r.ignore_eos = s.ignore_eos;
        r.max_tokens = max_tokens ? *max_tokens : n_ctx_ - int64_t(tokens[p].size());
        std::shared_ptr<channel> ch = st.ch;
        r.on_token = [ch, k](int32_t id, const launch::token_logprobs* lp) {
          std::lock_guard<std::mutex> lock(ch->m);
          ch->slots[k].ids.push_back(id);
          if (lp) ch->slots[k].logprobs.push_back(*lp);
          ch->cv.notify_all();
        };
        r.prompt_logprobs = prompt_logprobs;
        if (prompt_logprobs >= 0)
          r.on_prompt = [ch, k](const std::vector<launch::token_logprobs>& answers) {
            std::lock_guard<std::mutex> lock(ch->m);
            ch->slots[k].prompt = answers;
            ch->cv.notify_all();
          };
        r.on_done = [ch, k](const finish_info& f) {
          std::lock_guard<std::mutex> lock(ch->m);
          ch->slots[k].done = f;
          ch->cv.notify_all();
        };
        submit_result sub = sched_.submit(std::move(r));
        if (!sub.ok()) {
          st.cancel_all();  // the choices already submitted go too
          if (sub.error == submit_error::queue_full) {
            res.set_header("Retry-After", "1");
            error(res, {503, "server_overloaded", sub.message, ""});
          } else {
            error(res, {400, "invalid_request_error", sub.message, ""});
          }
          return std::nullopt;
        }
        st.handles.push_back(sub.handle);
        st.ids.push_back(tokens[p]);
      }
    }
    return st;
  }

  // Waits up to `wait` for news of choice k (its ids, the end, and with want_prompt its prompt's
  // log-probabilities), and takes them.
  static taken next(channel& ch, size_t k, std::chrono::milliseconds wait, bool want_prompt = false) {
    std::unique_lock<std::mutex> lock(ch.m);
    ch.cv.wait_for(lock, wait, [&] { return has_news(ch.slots[k], want_prompt); });
    taken t = take(ch.slots[k]);
    if (!t.ids.empty()) t.done.reset();  // the end only after every id before it (the slot keeps it)
    return t;
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

  // The whole text of choice k of a non-streamed request; ends it early when a stop string has come.
  // With `track`, also the tokens' log-probabilities, and the prompt's when `track` wants them (echo).
  std::string collect(const started& s, size_t k, const std::vector<std::string>& stop, finish_info& fin, bool& stopped,
                      logprob_track* track, std::optional<std::vector<launch::token_logprobs>>* prompt) {
    text_stream ts(tok_, fold_ids_);
    std::string text;
    std::optional<finish_info> done;
    while (!done) {
      taken t = next(*s.ch, k, std::chrono::milliseconds(1000), prompt != nullptr);
      if (t.prompt && prompt) *prompt = std::move(t.prompt);
      if (track) track->add(t.ids, t.logprobs);
      text += ts.take(t.ids);
      if (!stopped && find_stop(text, stop)) {
        stopped = true;
        s.handles[k].cancel();  // the rest would be cut anyway
      }
      done = t.done;
    }
    text += ts.dec.flush();
    fin = *done;
    return text;
  }

  // Cancels every choice of a request when the handler leaves (an error thrown half-way included): the
  // choices that ended are not affected.
  struct cancel_on_exit {
    const started& s;
    ~cancel_on_exit() { s.cancel_all(); }
  };

  void chat(const httplib::Request& req, httplib::Response& res) {
    auto parsed = parse_chat_request(req.body, limits_);
    if (auto* e = std::get_if<api_error>(&parsed)) return error(res, *e);
    const chat_request cr = std::get<chat_request>(std::move(parsed));
    const std::vector<prompt_input> prompt{{cr.prompt, {}}};
    auto st = start(res, prompt, "messages", cr.sampling, cr.max_tokens, cr.top_logprobs, cr.n);
    if (!st) return;
    const auto new_track = [&] {
      return cr.top_logprobs ? std::optional<logprob_track>(std::in_place, tok_, fold_ids_, cr.output.stop)
                             : std::nullopt;
    };
    if (!cr.stream) {
      const cancel_on_exit guard{*st};
      std::vector<std::optional<logprob_track>> tracks(st->size());
      std::vector<chat_choice> choices;
      int64_t completion_tokens = 0;
      for (size_t k = 0; k < st->size(); ++k) {
        if (cr.top_logprobs) tracks[k].emplace(tok_, fold_ids_, cr.output.stop);
        finish_info fin;
        bool stopped = false;
        const std::string text =
            collect(*st, k, cr.output.stop, fin, stopped, tracks[k] ? &*tracks[k] : nullptr, nullptr);
        chat_choice c{parse_output(text, cr.output), finish_reason::stop, tracks[k] ? &tracks[k]->pending : nullptr};
        c.finish = reason_of(fin, stopped || c.out.stopped);
        completion_tokens += fin.completion_tokens;
        choices.push_back(std::move(c));
      }
      res.set_content(
          chat_completion_body(meta("chatcmpl-", cr.model), choices, {st->prompt_tokens, completion_tokens}),
          "application/json");
      return;
    }
    const response_meta m = meta("chatcmpl-", cr.model);
    std::vector<choice_stream<chat_stream>> choices;
    for (size_t k = 0; k < st->size(); ++k)
      choices.push_back({text_stream(tok_, fold_ids_), stream_splitter(cr.output),
                         chat_stream(m, cr.include_usage, int(k)), new_track(), std::nullopt});
    stream(res, std::move(*st), std::move(choices));
  }

  void completion(const httplib::Request& req, httplib::Response& res) {
    auto parsed = parse_completion_request(req.body, limits_);
    if (auto* e = std::get_if<api_error>(&parsed)) return error(res, *e);
    const completion_request cr = std::get<completion_request>(std::move(parsed));
    const bool echo_logprobs = cr.echo && cr.top_logprobs;
    auto st = start(res, cr.prompts, "prompt", cr.sampling, cr.max_tokens, cr.top_logprobs, cr.n,
                    echo_logprobs ? *cr.top_logprobs : -1);
    if (!st) return;
    // per choice: its log-probabilities' track, and the echo of its prompt
    std::vector<std::optional<logprob_track>> tracks(st->size());
    std::vector<std::optional<std::string>> echoes(st->size());
    for (size_t k = 0; k < st->size(); ++k) {
      if (cr.top_logprobs) tracks[k].emplace(tok_, fold_ids_, cr.stop);
      if (cr.echo) echoes[k] = rendered(st->ids[k]);
      if (tracks[k] && echoes[k]) tracks[k]->base = echoes[k]->size();
    }
    if (!cr.stream) {
      const cancel_on_exit guard{*st};
      std::vector<text_choice> choices;
      int64_t completion_tokens = 0;
      for (size_t k = 0; k < st->size(); ++k) {
        finish_info fin;
        bool stopped = false;
        std::optional<std::vector<launch::token_logprobs>> prompt;
        logprob_track* track = tracks[k] ? &*tracks[k] : nullptr;
        std::string text = collect(*st, k, cr.stop, fin, stopped, track, echo_logprobs ? &prompt : nullptr);
        if (const auto cut = find_stop(text, cr.stop)) text.resize(*cut), stopped = true;
        const finish_reason why = reason_of(fin, stopped);
        if (echoes[k]) {
          text.insert(0, *echoes[k]);
          if (track) track->add_prompt(st->ids[k], prompt.value_or(std::vector<launch::token_logprobs>{}));
        }
        completion_tokens += fin.completion_tokens;
        choices.push_back({std::move(text), why, track ? &track->pending : nullptr});
      }
      res.set_content(completion_body(meta("cmpl-", cr.model), choices, {st->prompt_tokens, completion_tokens}),
                      "application/json");
      return;
    }
    output_options plain;
    plain.stop = cr.stop;
    const response_meta m = meta("cmpl-", cr.model);
    std::vector<choice_stream<completion_frames>> choices;
    for (size_t k = 0; k < st->size(); ++k)
      choices.push_back({text_stream(tok_, fold_ids_), stream_splitter(plain),
                         completion_frames{completion_stream(m, cr.include_usage, int(k))}, std::move(tracks[k]),
                         std::move(echoes[k])});
    stream(res, std::move(*st), std::move(choices));
  }

  // completion_stream in chat_stream's shape: no opening frame, deltas of text only.
  struct completion_frames {
    completion_stream frames;
    std::string begin() const { return {}; }
    std::string delta(const stream_delta& d, const std::vector<token_logprob>* lp) const {
      return frames.delta(d.text, lp);
    }
    std::string finish(finish_reason why, const std::vector<token_logprob>* lp) const { return frames.finish(why, lp); }
    std::string close(const usage_info& u) const { return frames.close(u); }
  };

  // One choice of a streamed response: `frames` (chat_stream or completion_frames) turn the splitter's
  // deltas into server-sent events. With `track`, the log-probabilities of the tokens that arrived go
  // with the next chunk sent (the finish chunk takes what is left). With `echo`, its first text chunk is
  // the echoed prompt (with the prompt's log-probabilities when tracked, so it waits for them).
  template <class Frames>
  struct choice_stream {
    text_stream text;
    stream_splitter split;
    Frames frames;
    std::optional<logprob_track> track;
    std::optional<std::string> echo;  // not yet sent
    bool finished = false;
    int64_t completion_tokens = 0;

    // The frames for what the choice's slot delivered; an error ending throws std::runtime_error.
    std::string feed(taken t, const request_handle& handle, const std::vector<int32_t>& prompt_ids) {
      std::string out;
      std::vector<token_logprob>* pending = track ? &track->pending : nullptr;
      auto emit = [&](const stream_delta& d) {
        const std::string frame = frames.delta(d, pending && !pending->empty() ? pending : nullptr);
        if (!frame.empty() && pending) pending->clear();
        out += frame;
      };
      // the echo goes first: at once without log-probabilities, else once the prompt's have come (before
      // any id: the scheduler hands them over first), or at the end if they never do
      if (echo && (!pending || t.prompt || t.done)) {
        if (pending) track->add_prompt(prompt_ids, t.prompt.value_or(std::vector<launch::token_logprobs>{}));
        stream_delta d;
        d.text = std::move(*echo);
        echo.reset();
        emit(d);
      }
      if (pending) track->add(t.ids, t.logprobs);
      if (!t.ids.empty() && !split.stopped()) {
        for (const stream_delta& d : split.feed(text.take(t.ids))) emit(d);
        if (split.stopped()) handle.cancel();
      }
      if (t.done) {
        if (!split.stopped())
          for (const stream_delta& d : split.feed(text.dec.flush())) emit(d);
        for (const stream_delta& d : split.finish()) emit(d);
        out += frames.finish(reason_of(*t.done, split.stopped()), pending);
        completion_tokens = t.done->completion_tokens;
        finished = true;
      }
      return out;
    }
  };

  // A streamed response of one or more choices, sent as their ids arrive. A stop string cancels its
  // choice; a client that has gone (a failed write, or the connection's end before the response's)
  // cancels all of them. A choice that fails sends the error in-band and ends the stream.
  template <class Frames>
  void stream(httplib::Response& res, started st, std::vector<choice_stream<Frames>> choices) {
    struct stream_state {
      started s;
      std::vector<choice_stream<Frames>> c;
      bool begun = false;
      bool finished = false;
    };
    auto ss = std::make_shared<stream_state>(stream_state{std::move(st), std::move(choices)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [ss](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!ss->begun) {
            ss->begun = true;
            for (const auto& c : ss->c) out += c.frames.begin();
          }
          // wait for news of any unfinished choice, then take each one's
          std::vector<taken> news(ss->c.size());
          {
            channel& ch = *ss->s.ch;
            const auto wants = [&](size_t k) { return ss->c[k].echo.has_value() && ss->c[k].track.has_value(); };
            std::unique_lock<std::mutex> lock(ch.m);
            ch.cv.wait_for(lock, std::chrono::milliseconds(1000), [&] {
              for (size_t k = 0; k < ss->c.size(); ++k)
                if (!ss->c[k].finished && has_news(ch.slots[k], wants(k))) return true;
              return false;
            });
            for (size_t k = 0; k < ss->c.size(); ++k)
              if (!ss->c[k].finished && has_news(ch.slots[k], wants(k))) news[k] = take(ch.slots[k]);
          }
          bool all_done = true;
          try {
            for (size_t k = 0; k < ss->c.size(); ++k) {
              if (!ss->c[k].finished) out += ss->c[k].feed(std::move(news[k]), ss->s.handles[k], ss->s.ids[k]);
              all_done = all_done && ss->c[k].finished;
            }
          } catch (const std::exception& e) {
            // the stream has begun: the error goes in-band, as OpenAI's streams carry it
            ss->s.cancel_all();
            out += sse_event(error_body({500, "server_error", e.what(), ""}));
            out += std::string(sse_done);
            ss->finished = true;
            if (!sink.write(out.data(), out.size())) return false;
            sink.done();
            return true;
          }
          if (all_done) {
            int64_t completion_tokens = 0;
            for (const auto& c : ss->c) completion_tokens += c.completion_tokens;
            out += ss->c.front().frames.close({ss->s.prompt_tokens, completion_tokens});
            ss->finished = true;
            if (!sink.write(out.data(), out.size())) return false;
            sink.done();
            return true;
          }
          if (out.empty()) out = ": keep-alive\n\n";  // an SSE comment: finds a client that has gone
          return sink.write(out.data(), out.size());
        },
        [ss](bool) {
          // the connection is over: the requests still running lost their client
          if (!ss->finished) ss->s.cancel_all();
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
