// The Qwen3.5 chat template (ChatML with a thinking block) written as code, not run by a Jinja
// engine: it reproduces llama.cpp's models/templates/Qwen3.5-4B.jinja (the `tokenizer.chat_template`
// of Qwen3.5 GGUFs, spec §5) for text conversations. Not covered: the tool list system block, tool
// calls inside assistant turns, images and videos.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "q35/io/tokenizer_error.hpp"

namespace q35::io {

struct chat_message {
  std::string role;  // "system" (first message only), "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // an assistant turn's thinking, if kept apart from content
};

struct chat_options {
  bool add_generation_prompt = true;  // end with the opening of the assistant's turn
  bool enable_thinking = true;        // false: the generation prompt carries an empty think block
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

}  // namespace detail

// The prompt text for `messages` (parse its special tokens when encoding it). Throws tokenizer_error
// where the Jinja template raises: no messages, a system message that is not first, an unknown role,
// no user query.
inline std::string render_chat(std::span<const chat_message> messages, const chat_options& opt = {}) {
  constexpr std::string_view think_open = "<think>", think_close = "</think>";
  if (messages.empty()) throw tokenizer_error("chat template: no messages provided");
  std::string out;
  if (messages[0].role == "system")
    out += "<|im_start|>system\n" + std::string(detail::trim(messages[0].content)) + "<|im_end|>\n";

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
      out += "<|im_start|>assistant\n";
      if (i > *last_query && !reasoning.empty()) out += "<think>\n" + std::string(reasoning) + "\n</think>\n\n";
      out += std::string(content) + "<|im_end|>\n";
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
