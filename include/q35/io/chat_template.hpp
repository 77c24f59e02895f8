// The Qwen3.5 chat template (ChatML with a thinking block) written as code, not run by a Jinja
// engine: it reproduces llama.cpp's models/templates/Qwen3.5-4B.jinja (the `tokenizer.chat_template`
// of Qwen3.5 GGUFs, spec §5) for text conversations, the tool list system block and tool calls inside
// assistant turns. Not covered: images and videos.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "q35/io/tokenizer_error.hpp"

namespace q35::io {

// A function call of a past assistant turn. io/ carries no JSON library, so each argument value comes
// as the text the template prints for it (`args_value|tojson` or `args_value|string` under Python):
// a string as is, an object or array as tojson text (json.dumps: ", " and ": " separators, keys in
// order, non-ASCII kept), any other value as Python's str() ("True", "None", "42", "1e+16").
struct chat_tool_call {
  std::string name;
  std::vector<std::pair<std::string, std::string>> arguments;  // (name, rendered value) in the call's order
};

struct chat_message {
  std::string role;  // "system" (first message only), "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // an assistant turn's thinking, if kept apart from content
  std::vector<chat_tool_call> tool_calls;        // an assistant turn's calls, rendered after its content
};

struct chat_options {
  bool add_generation_prompt = true;  // end with the opening of the assistant's turn
  bool enable_thinking = true;        // false: the generation prompt carries an empty think block
  // The tools the model may call, each as the template's `tool|tojson` prints it (see chat_tool_call);
  // none: no tool block.
  std::vector<std::string> tools;
};

namespace detail {

// Jinja's `trim` / Python's str.strip() on ASCII whitespace.
inline std::string_view trim(std::string_view s, std::string_view chars = " \t\n\r\f\v") {
  const size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(chars) - b + 1);
}
inline std::string_view lstrip(std::string_view s, std::string_view chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}
inline std::string_view rstrip(std::string_view s, std::string_view chars) {
  const size_t e = s.find_last_not_of(chars);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

// A user turn that only carries tool results does not count as the user's query.
inline bool is_tool_response(std::string_view content) {
  constexpr std::string_view open = "<tool_response>", close = "</tool_response>";
  return content.starts_with(open) && content.ends_with(close);
}

// The system turn that lists the tools and teaches the call format; the system message follows it.
inline std::string tools_system_turn(std::span<const std::string> tools, std::string_view system) {
  std::string out = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
  for (const std::string& t : tools) out += "\n" + t;
  out += "\n</tools>";
  out +=
      "\n"
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
  if (!system.empty()) out += "\n\n" + std::string(system);
  return out + "<|im_end|>\n";
}

// An assistant turn's calls: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...
inline void append_tool_calls(std::string& out, std::span<const chat_tool_call> calls, bool has_content) {
  for (size_t j = 0; j < calls.size(); ++j) {
    // the first call is set apart from the content by a blank line; later ones follow on the next line
    out += j > 0         ? "\n<tool_call>\n<function="
           : has_content ? "\n\n<tool_call>\n<function="
                         : "<tool_call>\n<function=";
    out += calls[j].name + ">\n";
    for (const auto& [name, value] : calls[j].arguments)
      out += "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
    out += "</function>\n</tool_call>";
  }
}

}  // namespace detail

// The prompt text for `messages` (parse its special tokens when encoding it). Throws tokenizer_error
// where the Jinja template raises: no messages, a system message that is not first, an unknown role,
// no user query.
inline std::string render_chat(std::span<const chat_message> messages, const chat_options& opt = {}) {
  constexpr std::string_view think_open = "<think>", think_close = "</think>";
  if (messages.empty()) throw tokenizer_error("chat template: no messages provided");
  std::string out;
  const std::string_view system = messages[0].role == "system" ? detail::trim(messages[0].content) : "";
  if (!opt.tools.empty())
    out += detail::tools_system_turn(opt.tools, system);
  else if (messages[0].role == "system")
    out += "<|im_start|>system\n" + std::string(system) + "<|im_end|>\n";

  // Turns after the last real user query keep their reasoning.
  std::optional<size_t> last_query;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user" && !detail::is_tool_response(detail::trim(messages[i].content))) {
      last_query = i;
      break;
    }
  }
  if (!last_query) throw tokenizer_error("chat template: no user query found in messages");

  for (size_t i = 0; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    std::string_view content = detail::trim(m.content);
    if (m.role == "system") {
      if (i != 0) throw tokenizer_error("chat template: a system message must be at the beginning");
    } else if (m.role == "user") {
      out += "<|im_start|>user\n" + std::string(content) + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view reasoning;
      if (m.reasoning_content) {
        reasoning = *m.reasoning_content;
      } else if (const size_t close = content.find(think_close); close != std::string_view::npos) {
        // reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        std::string_view before = detail::rstrip(content.substr(0, close), "\n");
        if (const size_t open = before.rfind(think_open); open != std::string_view::npos)
          before = before.substr(open + think_open.size());
        reasoning = detail::lstrip(before, "\n");
        // content = content.split('</think>')[-1].lstrip('\n')
        content = detail::lstrip(content.substr(content.rfind(think_close) + think_close.size()), "\n");
      }
      reasoning = detail::trim(reasoning);
      // After the last query every turn gets a think block, an empty one too (upstream llama.cpp and
      // Qwen's own template; some forks skip empty blocks).
      out += "<|im_start|>assistant\n";
      if (i > *last_query) out += "<think>\n" + std::string(reasoning) + "\n</think>\n\n";
      out += content;
      detail::append_tool_calls(out, m.tool_calls, !detail::trim(content).empty());
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i > 0 && messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + std::string(content) + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      throw tokenizer_error("chat template: unexpected message role '" + m.role + "'");
    }
  }
  if (opt.add_generation_prompt)
    out += opt.enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

}  // namespace q35::io
