// The Qwen3.5 chat template against the exact strings of spec §5; every expected string was checked by
// rendering llama.cpp's models/templates/Qwen3.5-4B.jinja with Python jinja2 on the same messages.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "q35/io/chat_template.hpp"

using q35::io::chat_message;
using q35::io::chat_options;
using q35::io::render_chat;

TEST_CASE("chat template: user turn and generation prompt, thinking on by default") {
  const std::vector<chat_message> msgs = {{"user", "Hello!", {}}};
  CHECK(render_chat(msgs) == "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST_CASE("chat template: thinking off gives the empty think block of spec §5") {
  const std::vector<chat_message> msgs = {{"user", "Hello!", {}}};
  chat_options opt;
  opt.enable_thinking = false;
  CHECK(render_chat(msgs, opt) == "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  opt.add_generation_prompt = false;
  CHECK(render_chat(msgs, opt) == "<|im_start|>user\nHello!<|im_end|>\n");
}

TEST_CASE("chat template: system first, no default system prompt, contents trimmed") {
  const std::vector<chat_message> msgs = {{"system", "  You are terse.\n", {}}, {"user", "\nHi ", {}}};
  CHECK(render_chat(msgs) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n");
}

TEST_CASE("chat template: reasoning is kept only after the last user query") {
  const std::vector<chat_message> msgs = {
      {"user", "What is 2+2?", {}},
      {"assistant", "<think>\nadd them\n</think>\n\n4", {}},  // before the last query: reasoning dropped
      {"user", "And 3+3?", {}},
      {"assistant", "6", std::string("\nadd again\n")},  // after it: rendered in a think block
  };
  chat_options opt;
  opt.add_generation_prompt = false;
  CHECK(render_chat(msgs, opt) ==
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n");
}

TEST_CASE("chat template: tool results join one user turn and do not count as the query") {
  const std::vector<chat_message> msgs = {
      {"user", "Weather?", {}},
      {"assistant", "<think>call the tool</think>Checking.", {}},
      {"tool", "sunny", {}},
      {"tool", "22C", {}},
      {"assistant", "<think>\nread results\n</think>\nSunny, 22C.", {}},
  };
  CHECK(render_chat(msgs) ==
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\ncall the tool\n</think>\n\nChecking.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nread results\n</think>\n\nSunny, 22C.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n");
}

TEST_CASE("chat template: the template's own errors") {
  CHECK_THROWS_WITH_AS(render_chat({}), doctest::Contains("no messages"), q35::io::tokenizer_error);
  const std::vector<chat_message> late_system = {{"user", "a", {}}, {"system", "b", {}}};
  CHECK_THROWS_WITH_AS(render_chat(late_system), doctest::Contains("system message must be at the beginning"),
                       q35::io::tokenizer_error);
  const std::vector<chat_message> no_query = {{"system", "s", {}}};
  CHECK_THROWS_WITH_AS(render_chat(no_query), doctest::Contains("no user query"), q35::io::tokenizer_error);
  const std::vector<chat_message> bad_role = {{"user", "a", {}}, {"narrator", "b", {}}};
  CHECK_THROWS_WITH_AS(render_chat(bad_role), doctest::Contains("'narrator'"), q35::io::tokenizer_error);
}

// ---- tools and tool calls ------------------------------------------------------------------------
// Expected strings from jinja2 with transformers' `tojson` (json.dumps, ensure_ascii=False, keys in order,
// which llama.cpp's Jinja engine matches); the rules text between </tools> and the system message is the
// template's own, copied from that rendering once and shared by the cases below.

namespace {

const std::string weather_json =
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather — "
    "«metric»\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
    "\"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}";
const std::string now_json = "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}";
const std::string tool_rules =
    "\n</tools>\n"
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
const std::string tools_head = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";

}  // namespace

TEST_CASE("chat template: the tool list system block, without and with a system message") {
  chat_options opt;
  opt.tools = {weather_json, now_json};
  const std::vector<chat_message> plain = {{"user", "Hi", {}}};
  CHECK(render_chat(plain, opt) == tools_head + "\n" + weather_json + "\n" + now_json + tool_rules +
                                       "<|im_end|>\n"
                                       "<|im_start|>user\nHi<|im_end|>\n"
                                       "<|im_start|>assistant\n<think>\n");

  // the system message (trimmed) follows the rules after a blank line, inside the same turn
  opt.tools = {weather_json};
  opt.enable_thinking = false;
  const std::vector<chat_message> with_system = {{"system", "\n Be brief. \n", {}}, {"user", "Hi", {}}};
  CHECK(render_chat(with_system, opt) == tools_head + "\n" + weather_json + tool_rules +
                                             "\n\nBe brief.<|im_end|>\n"
                                             "<|im_start|>user\nHi<|im_end|>\n"
                                             "<|im_start|>assistant\n<think>\n\n</think>\n\n");

  // a blank system message adds nothing (without tools it would still open an empty system turn)
  opt.add_generation_prompt = false;
  const std::vector<chat_message> blank_system = {{"system", "  ", {}}, {"user", "Hi", {}}};
  CHECK(render_chat(blank_system, opt) ==
        tools_head + "\n" + weather_json + tool_rules + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  CHECK(render_chat(blank_system, chat_options{false, true, {}}) ==
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("chat template: tool calls after the last query, values as the template prints them") {
  // Python values: city 'Paris', days 3, metric True, extra None, ratio 1e16, opts {'a': [1, 2.5, 'x"y']},
  // text 'line1\nline2'; the next call has no arguments.
  const q35::io::chat_tool_call weather = {"get_weather",
                                           {{"city", "Paris"},
                                            {"days", "3"},
                                            {"metric", "True"},
                                            {"extra", "None"},
                                            {"ratio", "1e+16"},
                                            {"opts", "{\"a\": [1, 2.5, \"x\\\"y\"]}"},
                                            {"text", "line1\nline2"}}};
  const std::vector<chat_message> msgs = {
      {"user", "Weather in Paris and the time?", {}, {}},
      {"assistant", "<think>\nneed two tools\n</think>\n\nLet me check.", {}, {weather, {"now", {}}}},
      {"tool", "sunny", {}, {}},
      {"tool", "12:00", {}, {}},
      {"assistant", "", {}, {{"now", {{"tz", "UTC"}}}}},  // no content, no reasoning: an empty think block
      {"tool", "13:00", {}, {}},
  };
  chat_options opt;
  opt.tools = {weather_json, now_json};
  CHECK(render_chat(msgs, opt) == tools_head + "\n" + weather_json + "\n" + now_json + tool_rules +
                                      "<|im_end|>\n"
                                      "<|im_start|>user\nWeather in Paris and the time?<|im_end|>\n"
                                      "<|im_start|>assistant\n<think>\nneed two tools\n</think>\n\nLet me check.\n\n"
                                      "<tool_call>\n<function=get_weather>\n"
                                      "<parameter=city>\nParis\n</parameter>\n"
                                      "<parameter=days>\n3\n</parameter>\n"
                                      "<parameter=metric>\nTrue\n</parameter>\n"
                                      "<parameter=extra>\nNone\n</parameter>\n"
                                      "<parameter=ratio>\n1e+16\n</parameter>\n"
                                      "<parameter=opts>\n{\"a\": [1, 2.5, \"x\\\"y\"]}\n</parameter>\n"
                                      "<parameter=text>\nline1\nline2\n</parameter>\n"
                                      "</function>\n</tool_call>\n"
                                      "<tool_call>\n<function=now>\n</function>\n</tool_call><|im_end|>\n"
                                      "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
                                      "<tool_response>\n12:00\n</tool_response><|im_end|>\n"
                                      "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                      "<tool_call>\n<function=now>\n<parameter=tz>\nUTC\n</parameter>\n"
                                      "</function>\n</tool_call><|im_end|>\n"
                                      "<|im_start|>user\n<tool_response>\n13:00\n</tool_response><|im_end|>\n"
                                      "<|im_start|>assistant\n<think>\n");
}

TEST_CASE("chat template: tool calls before the last query, blank content, no tool list") {
  const std::vector<chat_message> msgs = {
      {"user", "Time?", {}, {}}, {"assistant", "  ", {}, {{"now", {}}}},  // blank content: the call starts the turn
      {"tool", "12:00", {}, {}}, {"assistant", "It is noon.", {}, {}},   {"user", "Thanks", {}, {}},
  };
  CHECK(render_chat(msgs, chat_options{false, true, {}}) ==
        "<|im_start|>user\nTime?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n<function=now>\n</function>\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nIt is noon.<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n");
}

TEST_CASE("chat template: a turn after the last query without reasoning gets an empty think block") {
  chat_options opt;
  opt.add_generation_prompt = false;
  const std::string expected =
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n";
  const std::vector<chat_message> no_reasoning = {{"user", "Hi", {}}, {"assistant", "Hello!", {}}};
  CHECK(render_chat(no_reasoning, opt) == expected);
  // an empty reasoning_content string is used as is (and stops the search for <think> in the content)
  const std::vector<chat_message> empty_reasoning = {{"user", "Hi", {}}, {"assistant", "Hello!", std::string()}};
  CHECK(render_chat(empty_reasoning, opt) == expected);
}
