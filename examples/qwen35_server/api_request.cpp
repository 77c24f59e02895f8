// Request bodies of /v1/chat/completions and /v1/completions: validation, the policy of api.hpp, and
// the chat prompt rendered through q35::io::render_chat.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>

#include "api.hpp"
#include "json_util.hpp"
#include "q35/io/chat_template.hpp"
#include "q35/io/utf8.hpp"

namespace q35::server {

namespace {

using detail::json;

// Parsing stops at the first problem by throwing it; the entry points turn it into their result.
struct request_error {
  api_error error;
};
[[noreturn]] void fail(std::string param, std::string message, int status = 400) {
  throw request_error{api_error{status, "invalid_request_error", std::move(message), std::move(param)}};
}

std::string field(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}
// A value for a message: ASCII (so cutting it is safe), at most ~60 bytes.
std::string shown(const json& j) {
  std::string s = j.dump(-1, ' ', true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}
const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}
[[noreturn]] void wrong_type(const std::string& name, const char* expected, const json& got) {
  fail(name, "'" + name + "' must be " + expected + ", got " + type_name(got));
}

// Keys of obj outside `known` get a 400 naming the first one.
void check_keys(const json& obj, std::string_view path, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : obj.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      fail(field(path, k), "unknown field '" + field(path, k) + "'");
}

// The value of key, or null when absent or null.
const json* get(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
std::optional<std::string> get_string(const json& obj, std::string_view path, std::string_view key) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(field(path, key), "a string", *v);
  return v->get<std::string>();
}
std::optional<bool> get_bool(const json& obj, std::string_view path, std::string_view key) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(field(path, key), "a boolean", *v);
  return v->get<bool>();
}
const json* get_object(const json& obj, std::string_view path, std::string_view key) {
  const json* v = get(obj, key);
  if (v && !v->is_object()) wrong_type(field(path, key), "an object", *v);
  return v;
}
// A number in [lo, hi]; lo_open excludes lo itself.
std::optional<float> get_number(const json& obj, std::string_view key, double lo, double hi, bool lo_open = false) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(std::string(key), "a number", *v);
  const double x = v->get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    fail(std::string(key), "'" + std::string(key) + "' must be in " + (lo_open ? "(" : "[") + detail::py_float(lo) +
                               ", " + (std::isinf(hi) ? "inf)" : detail::py_float(hi) + "]") + ", got " + shown(*v));
  return float(x);
}
std::optional<int64_t> get_int(const json& obj, std::string_view path, std::string_view key, int64_t lo, int64_t hi) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  const std::string name = field(path, key);
  const std::string range = " between " + std::to_string(lo) + " and " + std::to_string(hi);
  if (!v->is_number_integer()) {
    if (v->is_number()) fail(name, "'" + name + "' must be an integer" + range + ", got " + shown(*v));
    wrong_type(name, "an integer", *v);
  }
  // nlohmann holds non-negative integers as uint64_t, negative ones as int64_t
  const bool in_range = v->is_number_unsigned() ? hi >= 0 && v->get<uint64_t>() <= uint64_t(hi) &&
                                                      (lo <= 0 || v->get<uint64_t>() >= uint64_t(lo))
                                                : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!in_range) fail(name, "'" + name + "' must be an integer" + range + ", got " + shown(*v));
  return v->get<int64_t>();
}

// The text of a message content: a string, or an array of {"type": "text", "text": ...} parts joined
// as the template joins them (no separator).
std::string content_text(const json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(name, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(pname, "an object", part);
    const std::optional<std::string> type = get_string(part, pname, "type");
    if (!type) fail(pname + ".type", "'" + pname + ".type' is required");
    if (*type != "text")
      fail(pname + ".type", "content part type " + shown(part["type"]) + " is not supported (text only)");
    check_keys(part, pname, {"type", "text"});
    const std::optional<std::string> t = get_string(part, pname, "text");
    if (!t) fail(pname + ".text", "'" + pname + ".text' is required");
    text += *t;
  }
  return text;
}

// An assistant message's tool_calls, with each argument printed as the template prints it.
std::vector<io::chat_tool_call> tool_calls_of(const json& calls, const std::string& name) {
  if (!calls.is_array()) wrong_type(name, "an array", calls);
  std::vector<io::chat_tool_call> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string cname = name + "[" + std::to_string(i) + "]";
    if (!calls[i].is_object()) wrong_type(cname, "an object", calls[i]);
    check_keys(calls[i], cname, {"id", "type", "function", "index"});
    get_string(calls[i], cname, "id");
    if (const auto type = get_string(calls[i], cname, "type"); type && *type != "function")
      fail(cname + ".type", "'" + cname + ".type' must be \"function\", got " + shown(calls[i]["type"]));
    const json* fn = get_object(calls[i], cname, "function");
    const std::string fname = cname + ".function";
    if (!fn) fail(fname, "'" + fname + "' is required");
    check_keys(*fn, fname, {"name", "arguments"});
    io::chat_tool_call call;
    call.name = get_string(*fn, fname, "name").value_or("");
    if (call.name.empty()) fail(fname + ".name", "'" + fname + ".name' must be a non-empty string");
    // arguments: a string holding a JSON object (OpenAI), or the object itself (accepted too)
    const json* args = get(*fn, "arguments");
    json obj = json::object();
    if (args && args->is_string()) {
      obj = json::parse(args->get<std::string>(), nullptr, false);
      if (!obj.is_object())
        fail(fname + ".arguments", "'" + fname + ".arguments' must be a JSON object, got " + shown(*args));
    } else if (args && args->is_object()) {
      obj = *args;
    } else if (args) {
      wrong_type(fname + ".arguments", "a string holding a JSON object", *args);
    }
    for (const auto& [k, v] : obj.items()) call.arguments.emplace_back(k, detail::template_value(v));
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<io::chat_message> messages_of(const json& body) {
  const json* msgs = get(body, "messages");
  if (!msgs) fail("messages", "'messages' is required");
  if (!msgs->is_array()) wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) fail("messages", "'messages' must not be empty");
  std::vector<io::chat_message> out;
  bool has_query = false;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(name, "an object", m);
    check_keys(
        m, name,
        {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "refusal", "annotations"});
    io::chat_message msg;
    msg.role = get_string(m, name, "role").value_or("");
    if (msg.role.empty()) fail(name + ".role", "'" + name + ".role' must be a non-empty string");
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system message
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      fail(name + ".role", "unknown role " + shown(m["role"]) + " in '" + name +
                               ".role' (expected system, developer, user, assistant or tool)");
    if (msg.role == "system" && i != 0)
      fail(name + ".role", "a system message must be the first message (the Qwen3.5 template has no other place)");
    get_string(m, name, "name");
    get_string(m, name, "tool_call_id");
    get_string(m, name, "refusal");
    const json* content = get(m, "content");
    if (content) {
      msg.content = content_text(*content, name + ".content");
    } else if (msg.role != "assistant") {
      fail(name + ".content", "'" + name + ".content' is required");
    }
    if (const json* calls = get(m, "tool_calls")) {
      if (msg.role != "assistant") fail(name + ".tool_calls", "only assistant messages carry tool_calls");
      msg.tool_calls = tool_calls_of(*calls, name + ".tool_calls");
    }
    if (const auto r = get_string(m, name, "reasoning_content")) {
      if (msg.role != "assistant") fail(name + ".reasoning_content", "only assistant messages carry reasoning_content");
      msg.reasoning_content = *r;
    }
    if (msg.role == "user" && !io::detail::is_tool_response(io::detail::trim(msg.content))) has_query = true;
    out.push_back(std::move(msg));
  }
  if (!has_query) fail("messages", "'messages' must contain a user message that is not only tool results");
  return out;
}

// The request's tools: the template text of each (the object as sent, through tojson) and the
// parameter types the tool call parser needs.
void tools_of(const json& tools, std::vector<std::string>& texts, std::vector<tool_def>& defs) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string name = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) wrong_type(name, "an object", t);
    if (get_string(t, name, "type").value_or("") != "function")
      fail(name + ".type", "'" + name + ".type' must be \"function\"");
    const json* fn = get_object(t, name, "function");
    if (!fn) fail(name + ".function", "'" + name + ".function' is required");
    tool_def def;
    def.name = get_string(*fn, name + ".function", "name").value_or("");
    if (def.name.empty()) fail(name + ".function.name", "'" + name + ".function.name' must be a non-empty string");
    get_string(*fn, name + ".function", "description");
    if (const json* params = get_object(*fn, name + ".function", "parameters"))
      if (const json* props = get(*params, "properties"); props && props->is_object())
        for (const auto& [k, v] : props->items()) {
          const json* type = v.is_object() ? get(v, "type") : nullptr;
          def.param_types.emplace_back(k, type && type->is_string() ? type->get<std::string>() : "");
        }
    texts.push_back(detail::py_dump(t));
    defs.push_back(std::move(def));
  }
}

// The raw body: size, UTF-8 (before nlohmann sees it, so every later string is valid), nesting depth.
json parse_body(std::string_view body, const api_limits& limits) {
  if (body.size() > limits.max_body_bytes)
    fail("",
         "request body of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
             std::to_string(limits.max_body_bytes),
         413);
  for (size_t pos = 0; pos < body.size();) {
    const size_t n = io::utf8_valid_length_at(body, pos);
    if (n == 0) fail("", "request body is not valid UTF-8 (byte " + std::to_string(pos) + ")");
    pos += n;
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '[' || c == '{') && ++depth > limits.max_json_depth) {
      fail("", "JSON nested deeper than " + std::to_string(limits.max_json_depth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    json j = json::parse(body);
    if (!j.is_object()) fail("", std::string("the request body must be a JSON object, got ") + type_name(j));
    return j;
  } catch (const json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    fail("", "malformed JSON at byte " + std::to_string(e.byte) + ": " + what);
  } catch (const json::exception& e) {  // e.g. a number out of range
    fail("", std::string("malformed JSON: ") + e.what());
  }
}

// The fields both endpoints share.
// {"<token id>": bias, ...}: OpenAI's bias in [-100, 100], or false (llama-server's ban: -inf).
std::vector<std::pair<int32_t, float>> logit_bias_of(const json& lb, const api_limits& limits) {
  if (lb.size() > limits.max_logit_bias)
    fail("logit_bias", "'logit_bias' holds " + std::to_string(lb.size()) + " tokens, at most " +
                           std::to_string(limits.max_logit_bias) + " are allowed");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, v] : lb.items()) {
    const std::string name = field("logit_bias", key);
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0)
      fail(name, "'logit_bias' keys must be token ids (non-negative integers), got " + shown(json(key)));
    if (v.is_boolean() && !v.get<bool>()) {
      out.emplace_back(id, -INFINITY);
    } else if (v.is_number()) {
      const double b = v.get<double>();
      if (!(b >= -100.0 && b <= 100.0)) fail(name, "'" + name + "' must be in [-100, 100], got " + shown(v));
      out.emplace_back(id, float(b));
    } else {
      wrong_type(name, "a number in [-100, 100] (or false, to ban the token)", v);
    }
  }
  return out;
}

void common_fields(const json& body, const api_limits& limits, sampling_options& s, bool& stream, bool& include_usage,
                   std::vector<std::string>& stop, int& n) {
  get_string(body, "", "model");
  stream = get_bool(body, "", "stream").value_or(false);
  if (const json* so = get_object(body, "", "stream_options")) {
    if (!stream) fail("stream_options", "'stream_options' is only allowed with \"stream\": true");
    check_keys(*so, "stream_options", {"include_usage"});
    include_usage = get_bool(*so, "stream_options", "include_usage").value_or(false);
  }
  s.temperature = get_number(body, "temperature", 0, 2).value_or(s.temperature);
  s.top_p = get_number(body, "top_p", 0, 1, /*lo_open=*/true).value_or(s.top_p);
  s.top_k = int(std::max<int64_t>(0, get_int(body, "", "top_k", -1, 1 << 30).value_or(0)));  // -1: off (vLLM)
  s.min_p = get_number(body, "min_p", 0, 1).value_or(s.min_p);
  s.repeat_penalty = get_number(body, "repetition_penalty", 0, INFINITY, /*lo_open=*/true).value_or(1.0f);
  s.presence_penalty = get_number(body, "presence_penalty", -2, 2).value_or(0.0f);
  s.frequency_penalty = get_number(body, "frequency_penalty", -2, 2).value_or(0.0f);
  if (const json* seed = get(body, "seed")) {
    if (!seed->is_number_integer()) wrong_type("seed", "an integer", *seed);
    // -1 asks for a random seed (llama.cpp's convention); other values are taken modulo 2^64
    if (seed->is_number_unsigned() || seed->get<int64_t>() != -1)
      s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
  }
  if (const json* st = get(body, "stop")) {
    if (st->is_string()) {
      stop = {st->get<std::string>()};
    } else if (st->is_array()) {
      if (st->size() > limits.max_stop)
        fail("stop", "'stop' holds " + std::to_string(st->size()) + " strings, at most " +
                         std::to_string(limits.max_stop) + " are allowed");
      for (size_t i = 0; i < st->size(); ++i) {
        if (!(*st)[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", (*st)[i]);
        stop.push_back((*st)[i].get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *st);
    }
    std::erase(stop, std::string());  // an empty stop string would end every generation at once
  }
  n = int(get_int(body, "", "n", 1, limits.max_choices).value_or(1));
  get_string(body, "", "user");
  get_object(body, "", "metadata");
  get_bool(body, "", "store");
  get_string(body, "", "service_tier");
  if (const json* lb = get_object(body, "", "logit_bias")) s.logit_bias = logit_bias_of(*lb, limits);
  s.ignore_eos = get_bool(body, "", "ignore_eos").value_or(false);
}

template <class Request>
std::variant<Request, api_error> guarded(auto&& parse) {
  try {
    return parse();
  } catch (const request_error& e) {
    return e.error;
  }
}

}  // namespace

std::variant<chat_request, api_error> parse_chat_request(std::string_view body_text, const api_limits& limits) {
  return guarded<chat_request>([&] {
    const json body = parse_body(body_text, limits);
    check_keys(body, "",
               {"model",
                "messages",
                "stream",
                "stream_options",
                "max_tokens",
                "max_completion_tokens",
                "temperature",
                "top_p",
                "top_k",
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "frequency_penalty",
                "seed",
                "stop",
                "n",
                "tools",
                "tool_choice",
                "parallel_tool_calls",
                "chat_template_kwargs",
                "enable_thinking",
                "response_format",
                "user",
                "metadata",
                "store",
                "service_tier",
                "logit_bias",
                "ignore_eos",
                "logprobs",
                "top_logprobs"});
    chat_request r;
    r.model = get_string(body, "", "model").value_or("");
    common_fields(body, limits, r.sampling, r.stream, r.include_usage, r.output.stop, r.n);
    r.max_tokens = get_int(body, "", "max_tokens", 1, limits.max_tokens);
    if (auto m = get_int(body, "", "max_completion_tokens", 1, limits.max_tokens)) r.max_tokens = m;
    const auto top = get_int(body, "", "top_logprobs", 0, max_top_logprobs);
    if (get_bool(body, "", "logprobs").value_or(false))
      r.top_logprobs = int(top.value_or(0));
    else if (top.value_or(0) > 0)
      fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    get_bool(body, "", "parallel_tool_calls");
    if (const json* rf = get_object(body, "", "response_format")) {
      const std::string type = get_string(*rf, "response_format", "type").value_or("");
      if (type != "text")
        fail("response_format.type", "response_format type " + shown(rf->value("type", json())) +
                                         " is not supported (only \"text\": no constrained decoding)");
    }

    io::chat_options opt;
    opt.enable_thinking = get_bool(body, "", "enable_thinking").value_or(true);
    if (const json* kw = get_object(body, "", "chat_template_kwargs")) {
      check_keys(*kw, "chat_template_kwargs", {"enable_thinking"});
      opt.enable_thinking = get_bool(*kw, "chat_template_kwargs", "enable_thinking").value_or(opt.enable_thinking);
    }
    std::vector<tool_def> defs;
    if (const json* tools = get(body, "tools")) tools_of(*tools, opt.tools, defs);
    if (const json* choice = get(body, "tool_choice")) {
      if (!choice->is_string() && !choice->is_object()) wrong_type("tool_choice", "a string or an object", *choice);
      const std::string c = choice->is_string() ? choice->get<std::string>() : "a named function";
      if (c == "none") {
        opt.tools.clear();
        defs.clear();
      } else if (c != "auto") {
        fail("tool_choice", "tool_choice " + shown(*choice) + " is not supported (only \"auto\" and \"none\")");
      }
    }
    const std::vector<io::chat_message> msgs = messages_of(body);
    try {
      r.prompt = io::render_chat(msgs, opt);
    } catch (const io::tokenizer_error& e) {  // the checks above leave none; kept as the template's own word
      fail("messages", e.what());
    }
    r.output.thinking = opt.enable_thinking;
    r.output.tool_calls = !defs.empty();
    r.output.tools = std::move(defs);
    r.output.call_id_prefix = new_id("call_") + "_";
    return r;
  });
}

std::variant<completion_request, api_error> parse_completion_request(std::string_view body_text,
                                                                     const api_limits& limits) {
  return guarded<completion_request>([&] {
    const json body = parse_body(body_text, limits);
    check_keys(body, "",
               {"model",
                "prompt",
                "stream",
                "stream_options",
                "max_tokens",
                "temperature",
                "top_p",
                "top_k",
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "frequency_penalty",
                "seed",
                "stop",
                "n",
                "best_of",
                "echo",
                "suffix",
                "logprobs",
                "user",
                "metadata",
                "store",
                "service_tier",
                "logit_bias",
                "ignore_eos"});
    completion_request r;
    r.model = get_string(body, "", "model").value_or("");
    common_fields(body, limits, r.sampling, r.stream, r.include_usage, r.stop, r.n);
    r.echo = get_bool(body, "", "echo").value_or(false);
    r.max_tokens = get_int(body, "", "max_tokens", r.echo ? 0 : 1, limits.max_tokens);
    const json* prompt = get(body, "prompt");
    if (!prompt) fail("prompt", "'prompt' is required");
    // "text", [id, ...] (one prompt), or an array of prompts: ["text", ...], [[id, ...], ...], mixed
    const auto is_id = [](const json& v) { return v.is_number_integer(); };
    const auto one_prompt = [&](const json& p, const std::string& where) {
      prompt_input in;
      if (p.is_string()) {
        in.text = p.get<std::string>();
        if (in.text.empty()) fail(where, "'" + where + "' must not be empty");
      } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), is_id)) {
        for (size_t i = 0; i < p.size(); ++i) {
          const json& v = p[i];
          const std::string at = where + "[" + std::to_string(i) + "]";
          if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX) : v.get<int64_t>() < 0)
            fail(at, "'" + at + "' must be a token id (a non-negative integer), got " + shown(v));
          in.ids.push_back(int32_t(v.get<int64_t>()));
        }
      } else if (p.is_array() && p.empty()) {
        fail(where, "'" + where + "' must not be empty");
      } else {
        wrong_type(where, "a string or an array of token ids", p);
      }
      r.prompts.push_back(std::move(in));
    };
    if (prompt->is_array() && !prompt->empty() && !std::all_of(prompt->begin(), prompt->end(), is_id)) {
      for (size_t i = 0; i < prompt->size(); ++i) one_prompt((*prompt)[i], "prompt[" + std::to_string(i) + "]");
    } else {
      one_prompt(*prompt, "prompt");
    }
    if (int64_t(r.prompts.size()) * r.n > limits.max_choices)
      fail("n", std::to_string(r.prompts.size()) + " prompt(s) x n = " + std::to_string(r.n) + " make " +
                    std::to_string(int64_t(r.prompts.size()) * r.n) + " choices, more than the " +
                    std::to_string(limits.max_choices) + " a request may ask for");
    get_int(body, "", "best_of", 1, 1);
    if (get(body, "suffix")) fail("suffix", "'suffix' is not supported (no fill-in-the-middle)");
    if (const auto n = get_int(body, "", "logprobs", 0, max_top_logprobs)) r.top_logprobs = int(*n);
    return r;
  });
}

std::string error_body(const api_error& e) {
  const json body = {{"error",
                      {{"message", e.message},
                       {"type", e.type},
                       {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                       {"code", nullptr}}}};
  return detail::dump(body);
}

}  // namespace q35::server
