// qwen35_server_api's request side: every rejection of the request parsers, and the chat prompt of a
// full request against the Jinja template (expected text from jinja2 with transformers' tojson). The
// output parsers are tested in test_api_output.cpp, the response bodies, SSE frames and key checks in
// test_api_response.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "api.hpp"
#include "json_util.hpp"

namespace srv = q35::server;
using srv::api_error;
using srv::chat_request;
using srv::completion_request;

namespace {

chat_request chat_ok(std::string_view body, const srv::api_limits& limits = {}) {
  auto r = srv::parse_chat_request(body, limits);
  if (const auto* e = std::get_if<api_error>(&r)) FAIL_CHECK("unexpected error: ", e->message);
  REQUIRE(std::holds_alternative<chat_request>(r));
  return std::get<chat_request>(r);
}

api_error chat_err(std::string_view body, const srv::api_limits& limits = {}) {
  auto r = srv::parse_chat_request(body, limits);
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), "accepted: ", body);
  return std::get<api_error>(r);
}

api_error completion_err(std::string_view body) {
  auto r = srv::parse_completion_request(body);
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), "accepted: ", body);
  return std::get<api_error>(r);
}

// A chat body with one user message plus `extra` top-level fields ("" for none).
std::string with_fields(std::string_view extra) {
  return std::string(R"({"messages": [{"role": "user", "content": "Hi"}])") + (extra.empty() ? "" : ", ") +
         std::string(extra) + "}";
}
// A chat body whose messages array is `messages`.
std::string with_messages(std::string_view messages) { return "{\"messages\": " + std::string(messages) + "}"; }

struct bad_case {
  std::string body;
  std::string param;    // the field the error must name
  std::string message;  // a piece the message must contain
};

void check_rejections(const std::vector<bad_case>& cases, bool completion = false) {
  for (const bad_case& c : cases) {
    CAPTURE(c.body);
    const api_error e = completion ? completion_err(c.body) : chat_err(c.body);
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    CHECK(e.param == c.param);
    CHECK_MESSAGE(e.message.find(c.message) != std::string::npos, e.message);
  }
}

}  // namespace

// ---- requests: defaults and accepted forms -------------------------------------------------------

TEST_CASE("server api: a minimal chat request gets OpenAI's defaults") {
  const chat_request r = chat_ok(with_fields(""));
  CHECK(r.model.empty());
  CHECK(r.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  CHECK(r.sampling.temperature == 1.0f);
  CHECK(r.sampling.top_k == 0);
  CHECK(r.sampling.top_p == 1.0f);
  CHECK(r.sampling.min_p == 0.0f);
  CHECK(r.sampling.repeat_penalty == 1.0f);
  CHECK(!r.sampling.seed);
  CHECK(!r.max_tokens);
  CHECK(!r.stream);
  CHECK(!r.include_usage);
  CHECK(r.output.thinking);
  CHECK(!r.output.tool_calls);
  CHECK(r.output.stop.empty());
  CHECK(r.output.call_id_prefix.starts_with("call_"));
}

TEST_CASE("server api: every supported field maps onto the request") {
  const chat_request r = chat_ok(with_fields(
      R"("model": "qwen3.5-4b", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 100,
         "max_completion_tokens": 50, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
         "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -1, "seed": 42,
         "stop": ["###", "", "END"], "n": 1, "enable_thinking": true, "chat_template_kwargs": {"enable_thinking": false},
         "response_format": {"type": "text"}, "user": "u1", "metadata": {"k": "v"}, "store": false,
         "service_tier": "auto", "parallel_tool_calls": false, "logprobs": false, "top_logprobs": 0,
         "logit_bias": {"42": 5, "7": -100, "0": false, "248319": 0.25}, "tool_choice": "auto",
         "ignore_eos": true)"));
  CHECK(r.model == "qwen3.5-4b");
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.max_tokens == 50);  // max_completion_tokens wins over the older max_tokens
  CHECK(r.sampling.temperature == 0.5f);
  CHECK(r.sampling.top_p == 0.9f);
  CHECK(r.sampling.top_k == 20);
  CHECK(r.sampling.min_p == 0.05f);
  CHECK(r.sampling.repeat_penalty == 1.1f);
  CHECK(r.sampling.presence_penalty == 0.5f);
  CHECK(r.sampling.frequency_penalty == -1.0f);
  CHECK(r.sampling.seed == 42u);
  CHECK(!r.top_logprobs);  // logprobs false (top_logprobs 0 alone is accepted)
  CHECK(r.sampling.ignore_eos);
  CHECK(!chat_ok(with_fields("")).sampling.ignore_eos);
  CHECK(chat_ok(with_fields(R"("logprobs": true)")).top_logprobs == 0);
  CHECK(chat_ok(with_fields(R"("logprobs": true, "top_logprobs": 20)")).top_logprobs == 20);
  using bias = std::pair<int32_t, float>;  // in the order sent
  CHECK(r.sampling.logit_bias == std::vector<bias>{{42, 5.0f}, {7, -100.0f}, {0, -INFINITY}, {248319, 0.25f}});
  CHECK(r.output.stop == std::vector<std::string>{"###", "END"});  // empty stop strings dropped
  CHECK(!r.output.thinking);  // chat_template_kwargs wins over the top-level switch
  CHECK(r.prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));

  // explicit nulls are absent fields; seed -1 asks for a random seed; top_k -1 is off
  const chat_request n = chat_ok(with_fields(
      R"("model": null, "max_tokens": null, "temperature": null, "stop": null, "tools": null, "seed": -1, "top_k": -1)"));
  CHECK(!n.max_tokens);
  CHECK(n.sampling.temperature == 1.0f);
  CHECK(!n.sampling.seed);
  CHECK(n.sampling.top_k == 0);
  CHECK(chat_ok(with_fields(R"("seed": -2)")).sampling.seed == uint64_t(-2));  // modulo 2^64
  CHECK(chat_ok(with_fields(R"("seed": 18446744073709551615)")).sampling.seed == UINT64_MAX);
  CHECK(chat_ok(with_fields(R"("stop": "\n\n")")).output.stop == std::vector<std::string>{"\n\n"});
  CHECK(chat_ok(with_fields(R"("enable_thinking": false)")).prompt.ends_with("<think>\n\n</think>\n\n"));
  CHECK(chat_ok(with_fields(R"("max_tokens": 32768)")).max_tokens == 32768);
  CHECK(chat_ok(with_fields(R"("n": 3)")).n == 3);
  CHECK(chat_ok(with_fields("")).n == 1);
}

TEST_CASE("server api: content parts, developer role, reasoning_content and tool_calls reach the prompt") {
  const chat_request r = chat_ok(with_messages(
      R"([{"role": "developer", "content": [{"type": "text", "text": "Be"}, {"type": "text", "text": " brief."}]},
          {"role": "user", "content": [{"type": "text", "text": "Hi"}], "name": "ann"},
          {"role": "assistant", "content": "Hello", "reasoning_content": "greet", "refusal": null, "annotations": []},
          {"role": "user", "content": "Again"}])"));
  CHECK(r.prompt ==
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n"  // before the last query: reasoning dropped
        "<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n");
}

namespace {

const std::string tool_rules =
    "</tools>\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but "
    "NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n"
    "</IMPORTANT>";

// Tools with floats, non-ASCII and control characters; a tool call history whose arguments hold every
// JSON type (the template prints strings raw, True/None for true/null, Python's float repr, tojson for
// containers), a second call whose arguments are an object rather than a string.
const char* tools_body = R"json({"model": "qwen3.5",
 "messages": [
  {"role": "developer", "content": [{"type": "text", "text": " Be brief."}, {"type": "text", "text": " Use tools.\n"}]},
  {"role": "user", "content": "Weather in Zürich?\nAlso: \"quotes\" and a tab\t."},
  {"role": "assistant", "content": null, "reasoning_content": "Need the weather tool.", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather",
     "arguments": "{\"city\": \"Zürich\", \"days\": 3, \"metric\": true, \"unit\": null, \"ratio\": 1e16, \"tiny\": 1e-05, \"big\": 1e15, \"quarter\": 0.25, \"hundred\": 1e2, \"neg\": -0.0, \"nested\": {\"a\": [1, 2.5, \"x\\u0001\\\\\"], \"b\": false}}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
  {"role": "assistant", "content": "It is 21.5 °C.", "tool_calls": [{"type": "function", "function": {"name": "log", "arguments": {"msg": "done"}}}]},
  {"role": "tool", "content": "ok"}
 ],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather — «now»\nline2\u0007",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "days": {"type": "integer", "minimum": 1, "maximum": 1e1}, "ratio": {"type": "number", "default": 0.0001}},
   "required": ["city"]}}},
  {"type": "function", "function": {"name": "log", "parameters": {"type": "object", "properties": {"msg": {"type": "string"}}}}}],
 "chat_template_kwargs": {"enable_thinking": false}
})json";

}  // namespace

TEST_CASE("server api: a request with tools and tool call history renders as the Jinja template does") {
  const chat_request r = chat_ok(tools_body);
  const std::string expected =
      "<|im_start|>system\n"
      "# Tools\n"
      "\n"
      "You have access to the following functions:\n"
      "\n"
      "<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather — "
      "«now»\\nline2\\u0007\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
      "\"string\", \"description\": \"City name\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": "
      "10.0}, \"ratio\": {\"type\": \"number\", \"default\": 0.0001}}, \"required\": [\"city\"]}}}\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"log\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"msg\": {\"type\": \"string\"}}}}}\n" +
      tool_rules +
      "\n"
      "\n"
      "Be brief. Use tools.<|im_end|>\n"
      "<|im_start|>user\n"
      "Weather in Zürich?\n"
      "Also: \"quotes\" and a tab\t.<|im_end|>\n"
      "<|im_start|>assistant\n"
      "<think>\n"
      "Need the weather tool.\n"
      "</think>\n"
      "\n"
      "<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\nZürich\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n"
      "<parameter=unit>\nNone\n</parameter>\n"
      "<parameter=ratio>\n1e+16\n</parameter>\n"
      "<parameter=tiny>\n1e-05\n</parameter>\n"
      "<parameter=big>\n1000000000000000.0\n</parameter>\n"
      "<parameter=quarter>\n0.25\n</parameter>\n"
      "<parameter=hundred>\n100.0\n</parameter>\n"
      "<parameter=neg>\n-0.0\n</parameter>\n"
      "<parameter=nested>\n{\"a\": [1, 2.5, \"x\\u0001\\\\\"], \"b\": false}\n</parameter>\n"
      "</function>\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n{\"temp\": 21.5}\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 21.5 °C.\n\n"
      "<tool_call>\n<function=log>\n<parameter=msg>\ndone\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  CHECK(r.prompt == expected);
  CHECK(r.output.tool_calls);
  REQUIRE(r.output.tools.size() == 2);
  CHECK(r.output.tools[0].name == "get_weather");
  CHECK(r.output.tools[0].param_types ==
        std::vector<std::pair<std::string, std::string>>{{"city", "string"}, {"days", "integer"}, {"ratio", "number"}});

  // tool_choice "none": no tool block, no tool call parsing
  std::string none = tools_body;
  none.insert(none.rfind('}'), ", \"tool_choice\": \"none\"");
  const chat_request n = chat_ok(none);
  CHECK(n.prompt.starts_with("<|im_start|>system\nBe brief. Use tools.<|im_end|>\n"));
  CHECK(!n.output.tool_calls);
  CHECK(n.output.tools.empty());
}

TEST_CASE("server api: Python's float repr and json.dumps, as the template prints them") {
  // expected: Python's repr() of the same doubles
  const std::vector<std::pair<double, std::string>> floats = {{0.0, "0.0"},
                                                              {-0.0, "-0.0"},
                                                              {1.0, "1.0"},
                                                              {2.5, "2.5"},
                                                              {100.0, "100.0"},
                                                              {1e15, "1000000000000000.0"},
                                                              {1e16, "1e+16"},
                                                              {1.5e16, "1.5e+16"},
                                                              {0.0001, "0.0001"},
                                                              {1e-05, "1e-05"},
                                                              {1.5e-07, "1.5e-07"},
                                                              {123.456, "123.456"},
                                                              {1e100, "1e+100"},
                                                              {0.1, "0.1"},
                                                              {1.0 / 3, "0.3333333333333333"},
                                                              {9007199254740992.0, "9007199254740992.0"},
                                                              {5e-324, "5e-324"},
                                                              {1.7976931348623157e308, "1.7976931348623157e+308"},
                                                              {-12345.678, "-12345.678"}};
  for (const auto& [v, text] : floats) CHECK(srv::detail::py_float(v) == text);
  // json.dumps(ensure_ascii=False): ", " and ": ", key order kept, controls escaped, the rest raw
  const auto j =
      srv::detail::json::parse(R"({"z": [1, -2, 18446744073709551615, true, null], "a": "é\b\f\u001f\u007f/"})");
  CHECK(srv::detail::py_dump(j) ==
        "{\"z\": [1, -2, 18446744073709551615, true, null], \"a\": \"é\\b\\f\\u001f\x7f/\"}");
}

// ---- requests: rejections ------------------------------------------------------------------------

TEST_CASE("server api: malformed JSON names the position") {
  const api_error e = chat_err(R"({"messages": [}})");
  CHECK(e.status == 400);
  CHECK(e.param.empty());
  CHECK(e.message.find("malformed JSON at byte 15") != std::string::npos);
  CHECK(e.message.find("line 1, column 15") != std::string::npos);
  const api_error two_lines = chat_err("{\"messages\": [],\n \"stream\": tru}");
  CHECK(two_lines.message.find("line 2, column") != std::string::npos);
  CHECK(chat_err("").message.find("malformed JSON") != std::string::npos);
  CHECK(chat_err(R"({"messages": []} x)").message.find("malformed JSON") != std::string::npos);
  CHECK(chat_err(R"({"a": "\ud800"})").message.find("malformed JSON") != std::string::npos);  // lone surrogate
  CHECK(chat_err("[1, 2]").message.find("must be a JSON object, got an array") != std::string::npos);
}

TEST_CASE("server api: invalid UTF-8 anywhere is a 400 with its byte offset") {
  const std::string prefix = R"({"messages": [{"role": "user", "content": "ab)";
  for (const std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80", "\xf4\x90\x80\x80"}) {
    CAPTURE(bad);
    const api_error e = chat_err(prefix + bad + "\"}]}");
    CHECK(e.status == 400);
    CHECK(e.message == "request body is not valid UTF-8 (byte " + std::to_string(prefix.size()) + ")");
  }
  // in a key, and in a completion prompt
  CHECK(chat_err("{\"\xfe\": 1}").message.find("not valid UTF-8 (byte 2)") != std::string::npos);
  CHECK(completion_err("{\"prompt\": \"\xc3\"}").message.find("not valid UTF-8") != std::string::npos);
}

TEST_CASE("server api: size and nesting limits") {
  srv::api_limits small;
  small.max_body_bytes = 40;
  const api_error big = chat_err(with_fields(""), small);
  CHECK(big.status == 413);
  CHECK(big.message.find("exceeds the limit of 40") != std::string::npos);
  const std::string deep = with_fields("\"metadata\": " + std::string(70, '[') + std::string(70, ']'));
  CHECK(chat_err(deep).message.find("nested deeper than 64") != std::string::npos);
  srv::api_limits two_bias;
  two_bias.max_logit_bias = 2;
  const api_error many = chat_err(with_fields(R"("logit_bias": {"1": 1, "2": 2, "3": 3})"), two_bias);
  CHECK(many.param == "logit_bias");
  CHECK(many.message == "'logit_bias' holds 3 tokens, at most 2 are allowed");
  CHECK(chat_ok(with_fields(R"("logit_bias": {"1": 1, "2": 2})"), two_bias).sampling.logit_bias.size() == 2);
  // brackets inside strings do not count
  CHECK(chat_ok(with_fields("\"user\": \"" + std::string(100, '[') + "\"")).prompt.size() > 0);
}

TEST_CASE("server api: unknown fields and wrong types name the field") {
  check_rejections({
      {with_fields(R"("foo": 1)"), "foo", "unknown field 'foo'"},
      {with_fields(R"("continue_final_message": true)"), "continue_final_message", "unknown field"},
      {with_fields(R"("model": 5)"), "model", "'model' must be a string, got a number"},
      {R"({"messages": "hi"})", "messages", "'messages' must be an array, got a string"},
      {R"({"model": "m"})", "messages", "'messages' is required"},
      {with_fields(R"("stream": "yes")"), "stream", "'stream' must be a boolean, got a string"},
      {with_fields(R"("stream_options": {"include_usage": true})"), "stream_options", "only allowed with"},
      {with_fields(R"("stream": true, "stream_options": {"x": 1})"), "stream_options.x", "unknown field"},
      {with_fields(R"("stream": true, "stream_options": 1)"), "stream_options", "must be an object"},
      {with_fields(R"("temperature": "hot")"), "temperature", "'temperature' must be a number, got a string"},
      {with_fields(R"("temperature": 2.5)"), "temperature", "must be in [0.0, 2.0], got 2.5"},
      {with_fields(R"("temperature": -0.1)"), "temperature", "got -0.1"},
      {with_fields(R"("top_p": 0)"), "top_p", "must be in (0.0, 1.0], got 0"},
      {with_fields(R"("top_p": 1.5)"), "top_p", "got 1.5"},
      {with_fields(R"("top_k": 1.5)"), "top_k", "'top_k' must be an integer"},
      {with_fields(R"("top_k": -2)"), "top_k", "got -2"},
      {with_fields(R"("min_p": 2)"), "min_p", "must be in [0.0, 1.0]"},
      {with_fields(R"("repetition_penalty": 0)"), "repetition_penalty", "must be in (0.0, inf)"},
      {with_fields(R"("presence_penalty": 3)"), "presence_penalty", "must be in [-2.0, 2.0]"},
      {with_fields(R"("frequency_penalty": true)"), "frequency_penalty", "must be a number, got a boolean"},
      {with_fields(R"("seed": 1.5)"), "seed", "'seed' must be an integer, got a number"},
      {with_fields(R"("seed": "1")"), "seed", "got a string"},
      {with_fields(R"("stop": 5)"), "stop", "'stop' must be a string or an array of strings"},
      {with_fields(R"("stop": ["a", 1])"), "stop[1]", "'stop[1]' must be a string, got a number"},
      {with_fields(R"("stop": ["a", "b", "c", "d", "e"])"), "stop", "holds 5 strings, at most 4"},
      {with_fields(R"("n": 17)"), "n", "'n' must be an integer between 1 and 16, got 17"},
      {with_fields(R"("n": "1")"), "n", "must be an integer, got a string"},
      {with_fields(R"("tools": "x")"), "tools", "'tools' must be an array"},
      {with_fields(R"("tools": [{"type": "retrieval"}])"), "tools[0].type", "must be \"function\""},
      {with_fields(R"("tools": [{"type": "function"}])"), "tools[0].function", "is required"},
      {with_fields(R"("tools": [{"type": "function", "function": {"description": "d"}}])"), "tools[0].function.name",
       "non-empty string"},
      {with_fields(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])"),
       "tools[0].function.parameters", "must be an object"},
      {with_fields(R"("tool_choice": "required")"), "tool_choice", "\"required\" is not supported"},
      {with_fields(R"("tool_choice": {"type": "function", "function": {"name": "f"}})"), "tool_choice",
       "is not supported (only \"auto\" and \"none\")"},
      {with_fields(R"("tool_choice": 5)"), "tool_choice", "must be a string or an object"},
      {with_fields(R"("response_format": {"type": "json_object"})"), "response_format.type",
       "\"json_object\" is not supported"},
      {with_fields(R"("response_format": {"type": "json_schema", "json_schema": {}})"), "response_format.type",
       "\"json_schema\" is not supported"},
      {with_fields(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs", "between 0 and 20, got 21"},
      {with_fields(R"("top_logprobs": 5)"), "top_logprobs", "'top_logprobs' needs 'logprobs': true"},
      {with_fields(R"("ignore_eos": 1)"), "ignore_eos", "'ignore_eos' must be a boolean, got a number"},
      {with_fields(R"("logprobs": 1)"), "logprobs", "must be a boolean, got a number"},
      {with_fields(R"("logit_bias": [[42, 5]])"), "logit_bias", "'logit_bias' must be an object, got an array"},
      {with_fields(R"("logit_bias": {"42": 101})"), "logit_bias.42", "'logit_bias.42' must be in [-100, 100], got 101"},
      {with_fields(R"("logit_bias": {"42": "5"})"), "logit_bias.42", "must be a number in [-100, 100] (or false"},
      {with_fields(R"("logit_bias": {"42": true})"), "logit_bias.42", "got a boolean"},
      {with_fields(R"("logit_bias": {"hello": 1})"), "logit_bias.hello", "keys must be token ids"},
      {with_fields(R"("logit_bias": {"-1": 1})"), "logit_bias.-1", "keys must be token ids"},
      {with_fields(R"("logit_bias": {"4294967296": 1})"), "logit_bias.4294967296", "keys must be token ids"},
      {with_fields(R"("logit_bias": {"": 1})"), "logit_bias.", "keys must be token ids"},
      {with_fields(R"("chat_template_kwargs": {"add_vision_id": true})"), "chat_template_kwargs.add_vision_id",
       "unknown field"},
      {with_fields(R"("chat_template_kwargs": {"enable_thinking": "no"})"), "chat_template_kwargs.enable_thinking",
       "must be a boolean, got a string"},
      {with_fields(R"("enable_thinking": 0)"), "enable_thinking", "must be a boolean, got a number"},
  });
}

TEST_CASE("server api: max_tokens must be an integer in [1, limits.max_tokens]") {
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    for (const char* value : {"-1", "0", "32769", "99999999999999999999", "1e30", "2.5"}) {
      CAPTURE(value);
      const api_error e = chat_err(with_fields(std::string("\"").append(field).append("\": ").append(value)));
      CHECK(e.status == 400);
      CHECK(e.param == field);
      CHECK(e.message.find("must be an integer between 1 and 32768, got") != std::string::npos);
    }
    CHECK(chat_err(with_fields(std::string("\"").append(field).append("\": \"10\""))).message.find("got a string") !=
          std::string::npos);
  }
  srv::api_limits small;
  small.max_tokens = 10;
  CHECK(chat_err(with_fields(R"("max_tokens": 11)"), small).message.find("between 1 and 10, got 11") !=
        std::string::npos);
}

TEST_CASE("server api: messages that the template or the protocol cannot take") {
  check_rejections({
      {with_messages("[]"), "messages", "'messages' must not be empty"},
      {with_messages("[5]"), "messages[0]", "'messages[0]' must be an object, got a number"},
      {with_messages(R"([{"content": "x"}])"), "messages[0].role", "non-empty string"},
      {with_messages(R"([{"role": "", "content": "x"}])"), "messages[0].role", "non-empty string"},
      {with_messages(R"([{"role": 5, "content": "x"}])"), "messages[0].role", "must be a string, got a number"},
      {with_messages(R"([{"role": "narrator", "content": "x"}])"), "messages[0].role", "unknown role \"narrator\""},
      {with_messages(R"([{"role": "user", "content": "x", "foo": 1}])"), "messages[0].foo", "unknown field"},
      {with_messages(R"([{"role": "user"}])"), "messages[0].content", "is required"},
      {with_messages(R"([{"role": "user", "content": 5}])"), "messages[0].content",
       "must be a string or an array of content parts, got a number"},
      {with_messages(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])"),
       "messages[0].content[0].type", "\"image_url\" is not supported (text only)"},
      {with_messages(R"([{"role": "user", "content": [{"type": "text"}]}])"), "messages[0].content[0].text",
       "is required"},
      {with_messages(R"([{"role": "user", "content": ["x"]}])"), "messages[0].content[0]", "must be an object"},
      {with_messages(R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])"), "messages[1].role",
       "must be the first message"},
      {with_messages(R"([{"role": "user", "content": "a"}, {"role": "developer", "content": "b"}])"),
       "messages[1].role", "must be the first message"},
      {with_messages(R"([{"role": "system", "content": "s"}, {"role": "tool", "content": "r"}])"), "messages",
       "a user message that is not only tool results"},
      {with_messages(R"([{"role": "user", "content": "<tool_response>\nr\n</tool_response>"}])"), "messages",
       "not only tool results"},
      {with_messages(R"([{"role": "user", "content": "a", "tool_calls": []}])"), "messages[0].tool_calls",
       "only assistant messages"},
      {with_messages(R"([{"role": "user", "content": "a", "reasoning_content": "r"}])"),
       "messages[0].reasoning_content", "only assistant messages"},
      {with_messages(R"([{"role": "user", "content": "a"}, {"role": "assistant", "reasoning_content": 5}])"),
       "messages[1].reasoning_content", "must be a string"},
  });
}

TEST_CASE("server api: bad tool_calls in an assistant message") {
  auto call = [](std::string_view fn) {
    return with_messages(R"([{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [)" +
                         std::string(fn) + "]}]");
  };
  const std::string p = "messages[1].tool_calls[0]";
  check_rejections({
      {call(R"({"type": "function", "function": {"name": "f", "arguments": "not json"}})"), p + ".function.arguments",
       "must be a JSON object, got \"not json\""},
      {call(R"({"type": "function", "function": {"name": "f", "arguments": "[1]"}})"), p + ".function.arguments",
       "must be a JSON object"},
      {call(R"({"type": "function", "function": {"name": "f", "arguments": ""}})"), p + ".function.arguments",
       "must be a JSON object"},
      {call(R"({"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1"}})"), p + ".function.arguments",
       "must be a JSON object"},
      {call(R"({"type": "function", "function": {"name": "f", "arguments": 5}})"), p + ".function.arguments",
       "must be a string holding a JSON object, got a number"},
      {call(R"({"type": "function", "function": {"arguments": "{}"}})"), p + ".function.name", "non-empty string"},
      {call(R"({"type": "function"})"), p + ".function", "is required"},
      {call(R"({"type": "code", "function": {"name": "f"}})"), p + ".type", "must be \"function\""},
      {call(R"("f")"), p, "must be an object, got a string"},
  });
  CHECK(
      chat_err(with_messages(R"([{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": {}}])")).param ==
      "messages[1].tool_calls");
  // a call without arguments is fine
  CHECK(chat_ok(call(R"({"type": "function", "function": {"name": "f"}})")).prompt.find("<function=f>\n</function>") !=
        std::string::npos);
}

TEST_CASE("server api: completion requests") {
  auto r = srv::parse_completion_request(R"({"prompt": "Once upon", "max_tokens": 5, "stop": "."})");
  REQUIRE(std::holds_alternative<completion_request>(r));
  const completion_request& c = std::get<completion_request>(r);
  REQUIRE(c.prompts.size() == 1);
  CHECK(c.prompts[0].text == "Once upon");
  CHECK(c.n == 1);
  CHECK(c.max_tokens == 5);
  CHECK(c.stop == std::vector<std::string>{"."});
  CHECK(c.sampling.temperature == 1.0f);
  auto one = srv::parse_completion_request(R"({"prompt": ["x"], "echo": false, "suffix": null, "best_of": 1})");
  REQUIRE(std::holds_alternative<completion_request>(one));
  CHECK(std::get<completion_request>(one).prompts.size() == 1);
  CHECK(std::get<completion_request>(one).prompts[0].text == "x");
  CHECK(!std::get<completion_request>(one).top_logprobs);
  CHECK(!std::get<completion_request>(one).echo);
  // echo, and max_tokens 0 with it (scoring the prompt alone)
  auto echo = srv::parse_completion_request(R"({"prompt": "x", "echo": true, "max_tokens": 0, "logprobs": 1})");
  REQUIRE(std::holds_alternative<completion_request>(echo));
  CHECK(std::get<completion_request>(echo).echo);
  CHECK(std::get<completion_request>(echo).max_tokens == 0);
  CHECK(std::get<completion_request>(echo).top_logprobs == 1);
  for (const char* ids : {R"({"prompt": [5, 0, 248319]})", R"({"prompt": [[5, 0, 248319]]})"}) {
    CAPTURE(ids);
    auto tokens = srv::parse_completion_request(ids);
    REQUIRE(std::holds_alternative<completion_request>(tokens));
    REQUIRE(std::get<completion_request>(tokens).prompts.size() == 1);
    CHECK(std::get<completion_request>(tokens).prompts[0].text.empty());
    CHECK(std::get<completion_request>(tokens).prompts[0].ids == std::vector<int32_t>{5, 0, 248319});
  }
  // several prompts (text, ids, mixed) and n choices each
  auto many = srv::parse_completion_request(R"({"prompt": ["a", [1, 2], "b"], "n": 2})");
  REQUIRE(std::holds_alternative<completion_request>(many));
  const completion_request& m = std::get<completion_request>(many);
  REQUIRE(m.prompts.size() == 3);
  CHECK(m.prompts[0].text == "a");
  CHECK(m.prompts[1].ids == std::vector<int32_t>{1, 2});
  CHECK(m.prompts[2].text == "b");
  CHECK(m.n == 2);
  srv::api_limits few;
  few.max_choices = 5;
  auto over = srv::parse_completion_request(R"({"prompt": ["a", "b", "c"], "n": 2})", few);
  REQUIRE(std::holds_alternative<srv::api_error>(over));
  CHECK(std::get<srv::api_error>(over).param == "n");
  CHECK(std::get<srv::api_error>(over).message.find("3 prompt(s) x n = 2 make 6 choices, more than the 5") !=
        std::string::npos);
  auto with_logprobs = srv::parse_completion_request(R"({"prompt": "x", "logprobs": 3, "ignore_eos": true})");
  REQUIRE(std::holds_alternative<completion_request>(with_logprobs));
  CHECK(std::get<completion_request>(with_logprobs).top_logprobs == 3);
  CHECK(std::get<completion_request>(with_logprobs).sampling.ignore_eos);
  auto biased = srv::parse_completion_request(R"({"prompt": "x", "logit_bias": {"3": -1.5}})");
  REQUIRE(std::holds_alternative<completion_request>(biased));
  CHECK(std::get<completion_request>(biased).sampling.logit_bias == std::vector<std::pair<int32_t, float>>{{3, -1.5f}});

  check_rejections({{R"({"model": "m"})", "prompt", "'prompt' is required"},
                    {R"({"prompt": ""})", "prompt", "must not be empty"},
                    {R"({"prompt": [[1, 2], 3]})", "prompt[1]", "a string or an array of token ids"},
                    {R"({"prompt": [1, "a"]})", "prompt[0]", "an array of token ids"},
                    {R"({"prompt": [1, -2]})", "prompt[1]", "'prompt[1]' must be a token id"},
                    {R"({"prompt": [[4294967296]]})", "prompt[0][0]", "must be a token id"},
                    {R"({"prompt": [[]]})", "prompt[0]", "'prompt[0]' must not be empty"},
                    {R"({"prompt": []})", "prompt", "'prompt' must not be empty"},
                    {R"({"prompt": [1.5]})", "prompt[0]", "an array of token ids"},
                    {R"({"prompt": ["a", ""]})", "prompt[1]", "'prompt[1]' must not be empty"},
                    {R"({"prompt": 5})", "prompt", "got a number"},
                    {R"({"prompt": "x", "echo": 1})", "echo", "boolean"},
                    {R"({"prompt": "x", "echo": true, "max_tokens": -1})", "max_tokens", "between 0 and"},
                    {R"({"prompt": "x", "suffix": "y"})", "suffix", "not supported"},
                    {R"({"prompt": "x", "best_of": 2})", "best_of", "between 1 and 1"},
                    {R"({"prompt": "x", "n": 17})", "n", "between 1 and 16"},
                    {R"({"prompt": "x", "n": 0})", "n", "between 1 and 16"},
                    {R"({"prompt": "x", "logprobs": 21})", "logprobs", "between 0 and 20, got 21"},
                    {R"({"prompt": "x", "logprobs": true})", "logprobs", "must be an integer"},
                    {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "between 1 and"},
                    {R"({"prompt": "x", "max_completion_tokens": 5})", "max_completion_tokens", "unknown field"},
                    {R"({"prompt": "x", "messages": []})", "messages", "unknown field"}},
                   /*completion=*/true);
}

TEST_CASE("server api: OpenAI's error body") {
  CHECK(srv::error_body({400, "invalid_request_error", "'n' must be 1", "n"}) ==
        R"({"error":{"message":"'n' must be 1","type":"invalid_request_error","param":"n","code":null}})");
  CHECK(srv::error_body({401, "authentication_error", "bad key \"x\"", ""}) ==
        R"({"error":{"message":"bad key \"x\"","type":"authentication_error","param":null,"code":null}})");
  // every rejection's body is valid JSON carrying the same message
  const api_error e = chat_err(with_fields(R"("temperature": 9)"));
  const auto j = nlohmann::json::parse(srv::error_body(e));
  CHECK(j["error"]["message"] == e.message);
  CHECK(j["error"]["param"] == "temperature");
}
