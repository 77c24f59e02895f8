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
