// libFuzzer target for qwen35_server's protocol layer (examples/qwen35_server/api.hpp): what an HTTP
// client controls. The first byte picks what the rest is:
//   0, 1  a /v1/chat/completions or /v1/completions body: it parses or is a 4xx whose error body is
//         JSON naming the problem; a parsed request holds valid UTF-8 and max_tokens within the limit;
//   2     generated text with output options (thinking, tool calls, stop strings, piece sizes): the
//         stream splitter fed the text in pieces (cut at character boundaries, as the server's stream
//         decoder cuts) gives, per kind, exactly what parse_output gives for the whole text, and the
//         response body and every SSE frame built from it parse as JSON;
//   3     an Authorization header and a key: check_bearer and keys_equal against a plain reading of
//         RFC 6750's header form.
// Any exception, crash, leak, hang, sanitizer report or broken property (a trap) is a finding.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api.hpp"
#include "q35/io/utf8.hpp"

namespace srv = q35::server;
using nlohmann::json;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// An error is a 4xx and its body {"error": {"message": non-empty string, "type": string, ...}}.
void check_error(const srv::api_error& e) {
  require(e.status >= 400 && e.status < 500);
  const json j = json::parse(srv::error_body(e));  // throws (a finding) when the body is not JSON
  const json& m = j.at("error").at("message");
  require(m.is_string() && !m.get<std::string>().empty());
  require(j.at("error").at("type").is_string());
}

void check_max_tokens(const std::optional<int64_t>& m, const srv::api_limits& limits, int64_t lo = 1) {
  require(!m || (*m >= lo && *m <= limits.max_tokens));
}

const srv::response_meta meta{"chatcmpl-fuzz", 1700000000, "fuzz"};

void chat(std::string_view body) {
  srv::api_limits limits;
  limits.max_tokens = 4096, limits.max_body_bytes = 1 << 16;
  const auto r = srv::parse_chat_request(body, limits);
  if (const auto* e = std::get_if<srv::api_error>(&r)) return check_error(*e);
  const srv::chat_request& q = std::get<srv::chat_request>(r);
  require(q35::io::is_valid_utf8(q.prompt) && !q.prompt.empty());
  require(q.n >= 1 && q.n <= limits.max_choices);
  check_max_tokens(q.max_tokens, limits);
  for (const std::string& s : q.output.stop) require(!s.empty() && q35::io::is_valid_utf8(s));
}

void completion(std::string_view body) {
  srv::api_limits limits;
  limits.max_tokens = 4096, limits.max_body_bytes = 1 << 16;
  const auto r = srv::parse_completion_request(body, limits);
  if (const auto* e = std::get_if<srv::api_error>(&r)) return check_error(*e);
  const srv::completion_request& q = std::get<srv::completion_request>(r);
  require(!q.prompts.empty() && int64_t(q.prompts.size()) * q.n <= limits.max_choices && q.n >= 1);
  for (const srv::prompt_input& p : q.prompts)
    require(q35::io::is_valid_utf8(p.text) && (p.text.empty() != p.ids.empty()));
  check_max_tokens(q.max_tokens, limits, q.echo ? 0 : 1);  // max_tokens 0 only with echo
  for (const std::string& s : q.stop) require(!s.empty() && q35::io::is_valid_utf8(s));
}

std::string call_text(const srv::tool_call& c) { return c.id + "|" + c.name + "|" + c.arguments; }

// in: [flags][n_stop][len_1 .. len_n][piece seed][stop strings back to back][text]
void output(std::string_view in) {
  if (in.size() < 3) return;
  srv::output_options opt;
  const auto flags = static_cast<unsigned char>(in[0]);
  opt.thinking = flags & 1, opt.tool_calls = flags & 2;
  if (opt.tool_calls)
    opt.tools = {{"get_weather", {{"city", "string"}, {"days", "integer"}, {"metric", "boolean"}}},
                 {"run", {{"code", "string"}, {"options", "object"}, {"ratio", "number"}}}};
  const size_t n_stop = static_cast<unsigned char>(in[1]) % 4;
  if (in.size() < 2 + n_stop + 1) return;
  std::vector<size_t> stop_len;
  for (size_t i = 0; i < n_stop; ++i) stop_len.push_back(1 + static_cast<unsigned char>(in[2 + i]) % 8);
  unsigned seed = static_cast<unsigned char>(in[2 + n_stop]);
  in.remove_prefix(3 + n_stop);
  for (const size_t n : stop_len) {
    if (in.size() < n) return;
    opt.stop.emplace_back(in.substr(0, n));
    in.remove_prefix(n);
  }
  // the server's texts come from its stream decoder: whole UTF-8 characters (and valid stop strings)
  if (!q35::io::is_valid_utf8(in)) return;
  for (const std::string& s : opt.stop)
    if (!q35::io::is_valid_utf8(s)) return;

  const srv::parsed_output whole = srv::parse_output(in, opt);
  srv::stream_splitter sp(opt);
  std::string reasoning, content;
  std::vector<std::string> calls;
  srv::chat_stream frames(meta, (flags & 4) != 0);
  std::string sse = frames.begin();
  auto take = [&](const std::vector<srv::stream_delta>& ds) {
    for (const srv::stream_delta& d : ds) {
      if (d.kind == srv::delta_kind::reasoning) reasoning += d.text;
      if (d.kind == srv::delta_kind::content) content += d.text;
      if (d.kind == srv::delta_kind::tool_call) calls.push_back(call_text(d.call));
      require(d.kind == srv::delta_kind::tool_call || (!d.text.empty() && q35::io::is_valid_utf8(d.text)));
      sse += frames.delta(d);
    }
  };
  for (size_t pos = 0; pos < in.size() && !sp.stopped();) {
    seed = seed * 1103515245u + 12345u;
    size_t n = 1 + (seed >> 16) % 12;
    n = std::min(n, in.size() - pos);
    while (pos + n < in.size() && (static_cast<unsigned char>(in[pos + n]) & 0xC0) == 0x80)
      ++n;  // end the piece at a character boundary
    take(sp.feed(in.substr(pos, n)));
    pos += n;
  }
  take(sp.finish());
  require(reasoning == whole.reasoning_content);
  require(content == whole.content);
  std::vector<std::string> whole_calls;
  for (const srv::tool_call& c : whole.tool_calls) whole_calls.push_back(call_text(c));
  require(calls == whole_calls);
  require(sp.stopped() == whole.stopped);
  for (const srv::tool_call& c : whole.tool_calls) require(json::parse(c.arguments).is_object());

  // the bodies the server sends: JSON all through
  const srv::finish_reason finish = whole.stopped ? srv::finish_reason::stop : srv::finish_reason::length;
  const json body = json::parse(srv::chat_completion_body(meta, whole, finish, {3, 4}));
  require(body.at("choices").size() == 1);
  sse += frames.end(finish, {3, 4});
  for (std::string_view s = sse; !s.empty();) {
    require(s.starts_with("data: "));
    const size_t end = s.find("\n\n");
    require(end != std::string_view::npos);
    const std::string_view payload = s.substr(6, end - 6);
    if (payload != "[DONE]") (void)json::parse(payload);
    s.remove_prefix(end + 2);
  }
  const json plain = json::parse(srv::completion_body(meta, in, finish, {1, 2}));
  require(plain.at("choices").at(0).at("text").get<std::string>() == in);
}

// RFC 6750 section 2.1's header, read plainly: optional spaces/tabs, "Bearer" in any case, at least one
// space/tab, the token, optional spaces/tabs. The token must equal a non-empty key.
bool bearer_reference(std::string_view h, std::string_view key) {
  const auto ows = [](char c) { return c == ' ' || c == '\t'; };
  while (!h.empty() && ows(h.front())) h.remove_prefix(1);
  while (!h.empty() && ows(h.back())) h.remove_suffix(1);
  if (h.size() < 7) return false;
  for (size_t i = 0; i < 6; ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != "bearer"[i]) return false;
  if (!ows(h[6])) return false;
  h.remove_prefix(7);
  while (!h.empty() && ows(h.front())) h.remove_prefix(1);
  return !key.empty() && h == key;
}

void auth(std::string_view in) {
  const size_t nl = in.find('\n');
  const std::string_view header = in.substr(0, nl), key = nl == std::string_view::npos ? "" : in.substr(nl + 1);
  require(srv::keys_equal(header, key) == (header == key));
  require(srv::check_bearer(header, key) == bearer_reference(header, key));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      chat(in);
      break;
    case 1:
      completion(in);
      break;
    case 2:
      output(in);
      break;
    default:
      auth(in);
  }
  return 0;
}
