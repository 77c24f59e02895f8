// The OpenAI-compatible protocol of qwen35_server without its transport: request parsing and
// validation (every rejection is a 4xx with OpenAI's error body), the Qwen3.5 output parsers
// (reasoning, XML tool calls, stop strings, whole or streamed) and the response and SSE builders.
//
// Request policy (what llama-server and vLLM accept, made strict where they silently drift):
// - Unknown top-level fields are rejected with 400 naming the field, except an allow-list of fields
//   common clients send that change nothing here: user, metadata, store, service_tier,
//   parallel_tool_calls.
//   Unknown message fields are rejected the same way, except refusal and annotations (clients echo
//   them back from earlier responses). An explicit null counts as absent everywhere.
// - presence_penalty and frequency_penalty ([-2, 2], OpenAI's range) and repetition_penalty apply
//   as llama-server applies them: over the request's last 64 tokens, prompt included (llama.cpp's
//   penalties sampler; vLLM counts only the generated tokens for the first two).
// - logprobs: chat's logprobs: true with top_logprobs 0..20, completions' logprobs 0..20 (OpenAI allows
//   5 there; vLLM 20): the log-probabilities of the logits as computed (before bias, penalties and
//   temperature: vLLM's default), for every generated token up to the one that completes a stop string,
//   reasoning and tool-call tokens included; streamed, each chunk carries those of the tokens that
//   arrived since the previous chunk. A log-probability of -inf is sent as -9999.0 (vLLM's value).
// - echo (completions): the prompt comes first in the text and, with logprobs, in the log-probabilities
//   (each prompt token's under the logits of the tokens before it, the first one null), as OpenAI's
//   legacy API and lm-evaluation-harness's loglikelihood requests use them; max_tokens 0 then scores
//   the prompt alone. Such a request computes its whole prompt (no prefix reuse).
// - ignore_eos (llama-server's and vLLM's extension, which load generators send for fixed output
//   lengths): the end-of-generation tokens are never drawn, as llama.cpp's --ignore-eos does.
// - logit_bias: {"<token id>": bias in [-100, 100]} (OpenAI), or false for a token never to be drawn
//   (llama-server); added to the logits before the penalties (llama.cpp's order), at most 1,000 tokens.
// - tool_choice: "auto" (the default) is honoured; "none" leaves the tools out of the prompt and the
//   output unparsed; "required" and a named function need constrained decoding and get a 400.
//   parallel_tool_calls is accepted and ignored (every call the model writes is returned).
// - n (1 .. 16 choices, times the prompts of a completion): each choice is its own request to the
//   scheduler (so they decode together), choice i with seed + i when a seed is given; usage counts
//   each prompt once and every choice's tokens. A completion takes several prompts ("prompt": ["a",
//   "b"] or [[1, 2], [3]]); choice p x n + i belongs to prompt p.
// - The model name is echoed, never checked; best_of must be 1; response_format only "text".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace q35::server {

struct api_error {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field ("messages[1].content"), "" when none
};

// {"error":{"message":...,"type":...,"param":...|null,"code":null}}
std::string error_body(const api_error& e);

// The longest top_logprobs list (launch::logprobs_max_top).
inline constexpr int max_top_logprobs = 20;

struct api_limits {
  int64_t max_tokens = 32768;        // the largest max_tokens accepted (the server's context)
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int max_json_depth = 64;           // deeper nesting gets 400 (bounds the recursive code after parsing)
  size_t max_stop = 4;               // stop strings per request (OpenAI's limit)
  size_t max_logit_bias = 1000;      // logit_bias tokens per request (launch::logit_bias_max_entries is
                                     // 1,024: ignore_eos adds the end-of-generation ids)
  int max_choices = 16;              // choices per request at most: n x prompts, each one scheduler request
};

// The fields of q35::launch::sampling_params with OpenAI's defaults (not llama.cpp's).
struct sampling_options {
  float temperature = 1.0f;        // <= 0: greedy
  int top_k = 0;                   // 0: off
  float top_p = 1.0f;              // 1: off
  float min_p = 0.0f;              // 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float frequency_penalty = 0.0f;  // 0: off
  float presence_penalty = 0.0f;   // 0: off
  int repeat_last_n = 64;
  std::optional<uint64_t> seed;                       // none: the server picks one
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, bias (-inf: never drawn)
  bool ignore_eos = false;                            // end-of-generation tokens never drawn
};

// A tool of the request, kept for typing the parameter values of the model's calls.
struct tool_def {
  std::string name;
  std::vector<std::pair<std::string, std::string>> param_types;  // property -> JSON schema "type" ("" if none)
};

// How the generated text is cut and split (see parse_output and stream_splitter).
struct output_options {
  bool thinking = false;    // the prompt ends inside an open think block: text up to </think> is reasoning
  bool tool_calls = false;  // parse <tool_call> blocks out of the content
  std::vector<std::string> stop;
  std::vector<tool_def> tools;
  std::string call_id_prefix = "call_";  // tool call ids are this prefix + the call's index
};

struct chat_request {
  std::string model;   // as sent, "" when absent
  std::string prompt;  // the conversation rendered by q35::io::render_chat, generation prompt included
  sampling_options sampling;
  std::optional<int64_t> max_tokens;  // none: the server's choice (the rest of the context)
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  output_options output;            // thinking, tools (empty under tool_choice "none") and stop strings
  std::optional<int> top_logprobs;  // logprobs: true, with this many of the most likely tokens
  int n = 1;                        // choices, each generated on its own (seed + i with a seed)
};

// One prompt of a completion request: text (special tokens parsed), or token ids ([1, 2, 3], as vLLM and
// llama-server accept them; the scheduler checks them against the vocabulary) when ids is non-empty.
struct prompt_input {
  std::string text;
  std::vector<int32_t> ids;
};

struct completion_request {
  std::string model;
  // "text", ["text", ...], [1, 2], [[1, 2], ...]: each prompt gets n choices (choice index
  // prompt x n + i, as OpenAI numbers them)
  std::vector<prompt_input> prompts;
  int n = 1;
  sampling_options sampling;
  std::optional<int64_t> max_tokens;  // none: the server's choice (OpenAI's default is 16); 0 only with echo
  bool stream = false;
  bool include_usage = false;
  std::vector<std::string> stop;
  std::optional<int> top_logprobs;  // logprobs: N
  // echo: the text starts with the prompt, and with logprobs the prompt's tokens come first in them
  // (the first token's log-probability null: nothing precedes it)
  bool echo = false;
};

// POST /v1/chat/completions and /v1/completions bodies. n x prompts is at most limits.max_choices. Errors: 400 naming
// the field (and the value or the expected type), 413 for a body over limits.max_body_bytes.
std::variant<chat_request, api_error> parse_chat_request(std::string_view body, const api_limits& limits = {});
std::variant<completion_request, api_error> parse_completion_request(std::string_view body,
                                                                     const api_limits& limits = {});

// ---- output side -----------------------------------------------------------------------------------

struct tool_call {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, compact
};

struct reasoning_split {
  std::string reasoning_content;
  std::string content;
};
// Thinking on, the prompt ended with "<think>\n", so the text reads "reasoning\n</think>\n\ncontent":
// reasoning is the text before the first </think>, trimmed (all of it while </think> has not come),
// content the rest with its leading whitespace dropped. Thinking off: everything is content.
reasoning_split split_reasoning(std::string_view text, bool thinking = true);

struct tool_call_split {
  std::string content;  // the text outside the calls; whitespace next to a call is dropped
  std::vector<tool_call> calls;
};
// The <tool_call> blocks of content, each "<tool_call> <function=NAME> (<parameter=P>\nVALUE\n</parameter>)*
// </function> </tool_call>" (whitespace between tags free). A block that does not parse, or has no
// </tool_call>, stays in the content as written. One newline after <parameter=P> and one before
// </parameter> belong to the format. A value becomes a JSON string when the tool's schema types the
// parameter "string"; otherwise it is kept as JSON when it parses as JSON (numbers, true/false/null,
// objects, arrays, "quoted"), as a boolean for True/False under a "boolean" schema (the template prints
// past booleans that way), and as a string when nothing else fits (llama.cpp's rule for Qwen3-Coder and
// Qwen3.5, plus the boolean case).
tool_call_split parse_tool_calls(std::string_view content, std::span<const tool_def> tools = {},
                                 std::string_view call_id_prefix = "call_");

// Where the first stop string starts in text (the earliest; generation ends there, the stop string left
// out), or none.
std::optional<size_t> find_stop(std::string_view text, std::span<const std::string> stop);

struct parsed_output {
  std::string reasoning_content;
  std::string content;
  std::vector<tool_call> tool_calls;
  bool stopped = false;  // a stop string ended the text
};
// The whole generated text through find_stop, split_reasoning and (when opt.tool_calls) parse_tool_calls.
parsed_output parse_output(std::string_view text, const output_options& opt);

enum class delta_kind { reasoning, content, tool_call };
struct stream_delta {
  delta_kind kind = delta_kind::content;
  std::string text;  // reasoning or content
  tool_call call;    // delta_kind::tool_call
};

// parse_output for text that arrives in pieces: feed() returns the deltas that are certain so far and
// holds back what may still turn into "</think>", "<tool_call>", a stop string or whitespace that the
// whole-text parser would drop. The deltas of all feed() calls and finish() concatenate, per kind, to
// parse_output of the concatenated pieces. Text is held back only at character boundaries, so pieces of
// whole UTF-8 characters (q35::io's stream decoder gives those) make deltas of whole characters.
class stream_splitter {
 public:
  explicit stream_splitter(output_options opt);
  std::vector<stream_delta> feed(std::string_view piece);  // nothing more once stopped()
  std::vector<stream_delta> finish();                      // end of generation: release what was held
  bool stopped() const { return stopped_; }                // a stop string matched: end the generation

 private:
  enum class state { reasoning, content, in_call };
  void structure(std::string_view text, bool last, std::vector<stream_delta>& out);
  void emit(delta_kind kind, std::string_view text, std::vector<stream_delta>& out);
  void drop_held_space() { held_space_.clear(); }
  output_options opt_;
  std::string raw_;         // text not yet cleared of stop strings
  std::string buf_;         // text cleared of stop strings, not yet classified
  std::string held_space_;  // trailing whitespace of the current kind, emitted once non-space follows
  state state_;
  bool skip_space_;  // drop leading whitespace (start of reasoning, after </think>, after a call)
  bool stopped_ = false;
  bool finished_ = false;
  size_t n_calls_ = 0;
};

// ---- responses -------------------------------------------------------------------------------------

enum class finish_reason { stop, length, tool_calls };

struct usage_info {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

struct response_meta {
  std::string id;       // "chatcmpl-..." / "cmpl-...": see new_id
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// prefix + 24 random alphanumerics.
std::string new_id(std::string_view prefix);

// One generated token's log-probability and the most likely tokens at its position.
struct token_logprob {
  std::string token;  // its bytes (a token may hold part of a UTF-8 character)
  double logprob = 0;
  size_t text_offset = 0;  // where its bytes start in the text (the generated text, or with echo the whole)
  std::vector<std::pair<std::string, double>> top;
  bool known = true;  // false: the log-probability and top list are null (an echoed prompt's first token)
};
// A choice's "logprobs" (null when not asked for): chat's {"content": [{token, logprob, bytes,
// top_logprobs}], "refusal": null}, or the completions' {tokens, token_logprobs, top_logprobs (objects
// token -> logprob), text_offset}. A token that is not whole UTF-8 shows U+FFFD in "token"; "bytes"
// holds it exactly.

// A chat.completion object. content is null when empty and tool calls exist; reasoning_content and
// tool_calls appear only when non-empty; finish_reason stop becomes tool_calls when calls exist.
// logprobs: null when not given.
std::string chat_completion_body(const response_meta& meta, const parsed_output& out, finish_reason finish,
                                 const usage_info& usage, const std::vector<token_logprob>* logprobs = nullptr);
// A text_completion object.
std::string completion_body(const response_meta& meta, std::string_view text, finish_reason finish,
                            const usage_info& usage, const std::vector<token_logprob>* logprobs = nullptr);
// The same objects with several choices (indices 0, 1, ... in order).
struct chat_choice {
  parsed_output out;
  finish_reason finish = finish_reason::stop;
  const std::vector<token_logprob>* logprobs = nullptr;
};
std::string chat_completion_body(const response_meta& meta, std::span<const chat_choice> choices,
                                 const usage_info& usage);
struct text_choice {
  std::string text;
  finish_reason finish = finish_reason::stop;
  const std::vector<token_logprob>* logprobs = nullptr;
};
std::string completion_body(const response_meta& meta, std::span<const text_choice> choices, const usage_info& usage);
// GET /v1/models.
std::string models_body(std::span<const std::string> model_ids, int64_t created, std::string_view owned_by = "q35");

// "data: <json>\n\n" and the terminator "data: [DONE]\n\n".
std::string sse_event(std::string_view json);
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// The SSE frames of a streamed chat completion: begin() (the role chunk), one delta() per stream_delta,
// end() (the finish chunk, the usage chunk when include_usage, [DONE]). With several choices, one
// stream per choice (its `index`): each its begin(), deltas and finish(), then one close() for all.
class chat_stream {
 public:
  chat_stream(response_meta meta, bool include_usage, int index = 0)
      : meta_(std::move(meta)), include_usage_(include_usage), index_(index) {}
  std::string begin() const;
  // "" for a delta without text; logprobs (when given) go in the chunk's choice.
  std::string delta(const stream_delta& d, const std::vector<token_logprob>* logprobs = nullptr);
  std::string finish(finish_reason finish, const std::vector<token_logprob>* logprobs = nullptr) const;
  std::string close(const usage_info& usage) const;  // the usage chunk when include_usage, [DONE]
  std::string end(finish_reason f, const usage_info& usage,
                  const std::vector<token_logprob>* logprobs = nullptr) const {
    return finish(f, logprobs) + close(usage);
  }

 private:
  response_meta meta_;
  bool include_usage_;
  int index_;
  size_t n_calls_ = 0;
};

// The SSE frames of a streamed text completion (several choices: as chat_stream).
class completion_stream {
 public:
  completion_stream(response_meta meta, bool include_usage, int index = 0)
      : meta_(std::move(meta)), include_usage_(include_usage), index_(index) {}
  std::string delta(std::string_view text, const std::vector<token_logprob>* logprobs = nullptr) const;
  std::string finish(finish_reason finish, const std::vector<token_logprob>* logprobs = nullptr) const;
  std::string close(const usage_info& usage) const;
  std::string end(finish_reason f, const usage_info& usage,
                  const std::vector<token_logprob>* logprobs = nullptr) const {
    return finish(f, logprobs) + close(usage);
  }

 private:
  response_meta meta_;
  bool include_usage_;
  int index_;
};

// ---- authentication --------------------------------------------------------------------------------

// a == b in time that depends only on max(a.size(), b.size()): no exit at the first difference.
bool keys_equal(std::string_view a, std::string_view b);
// An "Authorization: Bearer <key>" header value (scheme case-insensitive) against key; an empty key
// never matches.
bool check_bearer(std::string_view authorization_header, std::string_view key);

}  // namespace q35::server
