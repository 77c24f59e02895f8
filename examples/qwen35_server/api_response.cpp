// Response bodies, SSE frames and the API key check of qwen35_server.
#include <algorithm>
#include <cmath>
#include <random>

#include "api.hpp"
#include "json_util.hpp"
#include "q35/io/utf8.hpp"

namespace q35::server {
namespace {

using detail::json;

const char* finish_name(finish_reason f) {
  return f == finish_reason::length ? "length" : f == finish_reason::tool_calls ? "tool_calls" : "stop";
}

json usage_json(const usage_info& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json call_json(const tool_call& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json head(const response_meta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

// One streamed chunk: the head, one choice, and "usage": null when usage comes at the end (OpenAI's form).
std::string chunk(const response_meta& meta, const char* object, json choice, bool include_usage) {
  json j = head(meta, object);
  j["choices"] = json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return sse_event(detail::dump(j));
}

// The last frames of a stream: the usage chunk (no choices) when asked for, then [DONE].
std::string tail(const response_meta& meta, const char* object, bool include_usage, const usage_info& usage) {
  std::string out;
  if (include_usage) {
    json j = head(meta, object);
    j["choices"] = json::array();
    j["usage"] = usage_json(usage);
    out += sse_event(detail::dump(j));
  }
  out += sse_done;
  return out;
}

// -inf (and NaN) as vLLM sends them: JSON has no infinity.
double finite_logprob(double v) { return std::isfinite(v) ? v : -9999.0; }

json bytes_json(const std::string& t) {
  json b = json::array();
  for (unsigned char c : t) b.push_back(int(c));
  return b;
}

json chat_logprobs(const std::vector<token_logprob>* tokens) {
  if (!tokens) return nullptr;
  json content = json::array();
  for (const token_logprob& t : *tokens) {
    json top = json::array();
    for (const auto& [tok, lp] : t.top)
      top.push_back({{"token", io::sanitize_utf8(tok)}, {"logprob", finite_logprob(lp)}, {"bytes", bytes_json(tok)}});
    content.push_back({{"token", io::sanitize_utf8(t.token)},
                       {"logprob", finite_logprob(t.logprob)},
                       {"bytes", bytes_json(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs(const std::vector<token_logprob>* tokens) {
  if (!tokens) return nullptr;
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const token_logprob& t : *tokens) {
    toks.push_back(io::sanitize_utf8(t.token));
    if (!t.known) {
      lps.push_back(nullptr), tops.push_back(nullptr);
    } else {
      lps.push_back(finite_logprob(t.logprob));
      json top = json::object();
      for (const auto& [tok, lp] : t.top) top[io::sanitize_utf8(tok)] = finite_logprob(lp);
      tops.push_back(std::move(top));
    }
    offsets.push_back(t.text_offset);
  }
  return {{"tokens", std::move(toks)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace

std::string new_id(std::string_view prefix) {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += alphabet[rd() % alphabet.size()];
  return id;
}

namespace {

json chat_choice_json(int index, const parsed_output& out, finish_reason finish,
                      const std::vector<token_logprob>* logprobs) {
  json message = {{"role", "assistant"}};
  message["content"] = out.content.empty() && !out.tool_calls.empty() ? json(nullptr) : json(out.content);
  if (!out.reasoning_content.empty()) message["reasoning_content"] = out.reasoning_content;
  if (!out.tool_calls.empty()) {
    message["tool_calls"] = json::array();
    for (const tool_call& c : out.tool_calls) message["tool_calls"].push_back(call_json(c));
    if (finish == finish_reason::stop) finish = finish_reason::tool_calls;
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", chat_logprobs(logprobs)},
          {"finish_reason", finish_name(finish)}};
}

json text_choice_json(int index, std::string_view text, finish_reason finish,
                      const std::vector<token_logprob>* logprobs) {
  return {{"text", std::string(text)},
          {"index", index},
          {"logprobs", completion_logprobs(logprobs)},
          {"finish_reason", finish_name(finish)}};
}

}  // namespace

std::string chat_completion_body(const response_meta& meta, const parsed_output& out, finish_reason finish,
                                 const usage_info& usage, const std::vector<token_logprob>* logprobs) {
  const chat_choice one{out, finish, logprobs};
  return chat_completion_body(meta, std::span<const chat_choice>(&one, 1), usage);
}

std::string chat_completion_body(const response_meta& meta, std::span<const chat_choice> choices,
                                 const usage_info& usage) {
  json j = head(meta, "chat.completion");
  j["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    j["choices"].push_back(chat_choice_json(int(i), choices[i].out, choices[i].finish, choices[i].logprobs));
  j["usage"] = usage_json(usage);
  return detail::dump(j);
}

std::string completion_body(const response_meta& meta, std::string_view text, finish_reason finish,
                            const usage_info& usage, const std::vector<token_logprob>* logprobs) {
  const text_choice one{std::string(text), finish, logprobs};
  return completion_body(meta, std::span<const text_choice>(&one, 1), usage);
}

std::string completion_body(const response_meta& meta, std::span<const text_choice> choices, const usage_info& usage) {
  json j = head(meta, "text_completion");
  j["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i)
    j["choices"].push_back(text_choice_json(int(i), choices[i].text, choices[i].finish, choices[i].logprobs));
  j["usage"] = usage_json(usage);
  return detail::dump(j);
}

std::string models_body(std::span<const std::string> model_ids, int64_t created, std::string_view owned_by) {
  json data = json::array();
  for (const std::string& id : model_ids)
    data.push_back({{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", std::string(owned_by)}});
  return detail::dump({{"object", "list"}, {"data", std::move(data)}});
}

std::string sse_event(std::string_view json_text) { return "data: " + std::string(json_text) + "\n\n"; }

std::string chat_stream::begin() const {
  return chunk(meta_, "chat.completion.chunk",
               {{"index", index_},
                {"delta", {{"role", "assistant"}, {"content", ""}}},
                {"logprobs", nullptr},
                {"finish_reason", nullptr}},
               include_usage_);
}

std::string chat_stream::delta(const stream_delta& d, const std::vector<token_logprob>* logprobs) {
  json delta;
  if (d.kind == delta_kind::tool_call) {
    // streamed calls carry their position, and come whole: id, name and all the arguments at once
    json call = {{"index", n_calls_++}};
    const json rest = call_json(d.call);
    for (const auto& [k, v] : rest.items()) call[k] = v;
    delta["tool_calls"] = json::array({std::move(call)});
  } else {
    if (d.text.empty()) return "";
    delta[d.kind == delta_kind::reasoning ? "reasoning_content" : "content"] = d.text;
  }
  return chunk(meta_, "chat.completion.chunk",
               {{"index", index_},
                {"delta", std::move(delta)},
                {"logprobs", chat_logprobs(logprobs)},
                {"finish_reason", nullptr}},
               include_usage_);
}

std::string chat_stream::finish(finish_reason finish, const std::vector<token_logprob>* logprobs) const {
  if (finish == finish_reason::stop && n_calls_ > 0) finish = finish_reason::tool_calls;
  return chunk(meta_, "chat.completion.chunk",
               {{"index", index_},
                {"delta", json::object()},
                {"logprobs", chat_logprobs(logprobs)},
                {"finish_reason", finish_name(finish)}},
               include_usage_);
}

std::string chat_stream::close(const usage_info& usage) const {
  return tail(meta_, "chat.completion.chunk", include_usage_, usage);
}

std::string completion_stream::delta(std::string_view text, const std::vector<token_logprob>* logprobs) const {
  if (text.empty()) return "";
  return chunk(meta_, "text_completion",
               {{"text", std::string(text)},
                {"index", index_},
                {"logprobs", completion_logprobs(logprobs)},
                {"finish_reason", nullptr}},
               include_usage_);
}

std::string completion_stream::finish(finish_reason finish, const std::vector<token_logprob>* logprobs) const {
  return chunk(meta_, "text_completion",
               {{"text", ""},
                {"index", index_},
                {"logprobs", completion_logprobs(logprobs)},
                {"finish_reason", finish_name(finish)}},
               include_usage_);
}

std::string completion_stream::close(const usage_info& usage) const {
  return tail(meta_, "text_completion", include_usage_, usage);
}

bool keys_equal(std::string_view a, std::string_view b) {
  // Every byte position up to the longer length is visited and folded into one accumulator; the
  // volatile store keeps the compiler from turning the loop into an early-exit comparison.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool check_bearer(std::string_view header, std::string_view key) {
  if (key.empty()) return false;
  constexpr std::string_view ows = " \t";
  const size_t b = header.find_first_not_of(ows);
  if (b == std::string_view::npos) return false;
  header = header.substr(b, header.find_last_not_of(ows) - b + 1);
  constexpr std::string_view scheme = "bearer";
  if (header.size() <= scheme.size() || ows.find(header[scheme.size()]) == std::string_view::npos) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return false;
  const std::string_view token = header.substr(header.find_first_not_of(ows, scheme.size()));
  return keys_equal(token, key);
}

}  // namespace q35::server
