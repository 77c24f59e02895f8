// The generated text of Qwen3.5 into OpenAI's fields: stop strings, reasoning, XML tool calls; whole
// (parse_output) and piece by piece (stream_splitter), with one set of rules for both.
#include <cmath>

#include "api.hpp"
#include "json_util.hpp"

namespace q35::server {
namespace {

using detail::json;
using detail::space_chars;

constexpr std::string_view think_close = "</think>", call_open = "<tool_call>", call_close = "</tool_call>";

std::string_view lstrip(std::string_view s) {
  const size_t b = s.find_first_not_of(space_chars);
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}
std::string_view rstrip(std::string_view s) {
  const size_t e = s.find_last_not_of(space_chars);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}

// The longest proper prefix of marker that text ends with: text that may still become marker.
size_t partial_suffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k)
    if (text.ends_with(marker.substr(0, k))) return k;
  return 0;
}

// A parameter value as JSON, by the rule of api.hpp (parse_tool_calls).
json typed_value(std::string_view v, std::string_view schema_type) {
  if (schema_type == "string") return json(std::string(v));
  const json j = json::parse(v, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && !(j.is_number_float() && !std::isfinite(j.get<double>()))) return j;
  if (schema_type == "boolean") {
    std::string lower(v);
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true" || lower == "false") return json(lower == "true");
  }
  return json(std::string(v));
}

// One "<tool_call>...</tool_call>" block (both tags included) as a call without id, or none when it
// does not follow the format.
std::optional<tool_call> parse_call_block(std::string_view block, std::span<const tool_def> tools) {
  std::string_view s = block.substr(call_open.size(), block.size() - call_open.size() - call_close.size());
  auto skip_space = [&] { s = lstrip(s); };
  auto take = [&](std::string_view lit) { return s.starts_with(lit) ? (s.remove_prefix(lit.size()), true) : false; };
  // the NAME of "<tag=NAME>": no line break, no '<', not blank
  auto take_name = [&](std::string& name) {
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    const std::string_view n = rstrip(lstrip(s.substr(0, gt)));
    if (n.empty() || n.find_first_of("<\n") != std::string_view::npos) return false;
    name = n;
    s.remove_prefix(gt + 1);
    return true;
  };

  tool_call call;
  skip_space();
  if (!take("<function=") || !take_name(call.name)) return std::nullopt;
  const tool_def* def = nullptr;
  for (const tool_def& t : tools)
    if (t.name == call.name) def = &t;
  json args = json::object();
  for (;;) {
    skip_space();
    if (take("</function>")) break;
    std::string param;
    if (!take("<parameter=") || !take_name(param)) return std::nullopt;
    const size_t end = s.find("</parameter>");
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view value = s.substr(0, end);
    if (value.starts_with('\n')) value.remove_prefix(1);  // the newlines the format puts around a value
    if (value.ends_with('\n')) value.remove_suffix(1);
    std::string_view type;
    if (def)
      for (const auto& [p, t] : def->param_types)
        if (p == param) type = t;
    args[param] = typed_value(value, type);
    s.remove_prefix(end + std::string_view("</parameter>").size());
  }
  skip_space();
  if (!s.empty()) return std::nullopt;
  call.arguments = detail::dump(args);
  return call;
}

}  // namespace

reasoning_split split_reasoning(std::string_view text, bool thinking) {
  if (!thinking) return {"", std::string(text)};
  const size_t p = text.find(think_close);
  if (p == std::string_view::npos) return {std::string(rstrip(lstrip(text))), ""};
  return {std::string(rstrip(lstrip(text.substr(0, p)))), std::string(lstrip(text.substr(p + think_close.size())))};
}

tool_call_split parse_tool_calls(std::string_view content, std::span<const tool_def> tools,
                                 std::string_view call_id_prefix) {
  tool_call_split out;
  std::string segment;  // text since the last call
  bool after_call = false;
  // whitespace next to a call is the format's, not content
  auto flush = [&](bool before_call) {
    std::string_view s = segment;
    if (after_call) s = lstrip(s);
    if (before_call) s = rstrip(s);
    out.content += s;
    segment.clear();
  };
  for (size_t pos = 0;;) {
    const size_t open = content.find(call_open, pos);
    const size_t close = open == std::string_view::npos ? open : content.find(call_close, open + call_open.size());
    if (close == std::string_view::npos) {  // no further block, or one without its end: content
      segment += content.substr(pos);
      break;
    }
    const size_t end = close + call_close.size();
    segment += content.substr(pos, open - pos);
    if (std::optional<tool_call> call = parse_call_block(content.substr(open, end - open), tools)) {
      flush(/*before_call=*/true);
      after_call = true;
      call->id = std::string(call_id_prefix) + std::to_string(out.calls.size());
      out.calls.push_back(std::move(*call));
    } else {
      segment += content.substr(open, end - open);
    }
    pos = end;
  }
  flush(/*before_call=*/false);
  return out;
}

std::optional<size_t> find_stop(std::string_view text, std::span<const std::string> stop) {
  // the stop string generation meets first is the one that ends first (the earlier start on a tie)
  std::optional<size_t> best_start;
  size_t best_end = std::string_view::npos;
  for (const std::string& s : stop) {
    const size_t p = s.empty() ? std::string_view::npos : text.find(s);
    if (p == std::string_view::npos) continue;
    if (p + s.size() < best_end || (p + s.size() == best_end && p < *best_start)) {
      best_end = p + s.size();
      best_start = p;
    }
  }
  return best_start;
}

parsed_output parse_output(std::string_view text, const output_options& opt) {
  parsed_output out;
  if (const std::optional<size_t> p = find_stop(text, opt.stop)) {
    text = text.substr(0, *p);
    out.stopped = true;
  }
  reasoning_split r = split_reasoning(text, opt.thinking);
  out.reasoning_content = std::move(r.reasoning_content);
  if (opt.tool_calls) {
    tool_call_split t = parse_tool_calls(r.content, opt.tools, opt.call_id_prefix);
    out.content = std::move(t.content);
    out.tool_calls = std::move(t.calls);
  } else {
    out.content = std::move(r.content);
  }
  return out;
}

// ---- stream_splitter: stop strings first (raw_), then the structure (buf_) ---------------------------

stream_splitter::stream_splitter(output_options opt)
    : opt_(std::move(opt)), state_(opt_.thinking ? state::reasoning : state::content), skip_space_(opt_.thinking) {}

std::vector<stream_delta> stream_splitter::feed(std::string_view piece) {
  std::vector<stream_delta> out;
  if (stopped_ || finished_) return out;
  raw_ += piece;
  if (const std::optional<size_t> p = find_stop(raw_, opt_.stop)) {
    stopped_ = finished_ = true;
    structure(std::string_view(raw_).substr(0, *p), /*last=*/true, out);
    raw_.clear();
    return out;
  }
  size_t keep = 0;  // the tail that may still become a stop string
  for (const std::string& s : opt_.stop) keep = std::max(keep, partial_suffix(raw_, s));
  structure(std::string_view(raw_).substr(0, raw_.size() - keep), /*last=*/false, out);
  raw_.erase(0, raw_.size() - keep);
  return out;
}

std::vector<stream_delta> stream_splitter::finish() {
  std::vector<stream_delta> out;
  if (finished_) return out;
  finished_ = true;
  structure(raw_, /*last=*/true, out);
  raw_.clear();
  return out;
}

void stream_splitter::structure(std::string_view text, bool last, std::vector<stream_delta>& out) {
  buf_ += text;
  for (;;) {
    if (state_ == state::reasoning) {
      if (const size_t p = buf_.find(think_close); p != std::string::npos) {
        emit(delta_kind::reasoning, std::string_view(buf_).substr(0, p), out);
        drop_held_space();  // reasoning is trimmed
        buf_.erase(0, p + think_close.size());
        state_ = state::content;
        skip_space_ = true;
        continue;
      }
      const size_t keep = last ? 0 : partial_suffix(buf_, think_close);
      emit(delta_kind::reasoning, std::string_view(buf_).substr(0, buf_.size() - keep), out);
      buf_.erase(0, buf_.size() - keep);
      if (last) drop_held_space();
      return;
    }
    if (state_ == state::content) {
      const size_t p = opt_.tool_calls ? buf_.find(call_open) : std::string::npos;
      if (p != std::string::npos) {
        emit(delta_kind::content, std::string_view(buf_).substr(0, p), out);
        buf_.erase(0, p);
        state_ = state::in_call;
        continue;
      }
      const size_t keep = last || !opt_.tool_calls ? 0 : partial_suffix(buf_, call_open);
      emit(delta_kind::content, std::string_view(buf_).substr(0, buf_.size() - keep), out);
      buf_.erase(0, buf_.size() - keep);
    } else {  // in_call: buf_ starts with <tool_call>; wait for its end
      const size_t close = buf_.find(call_close, call_open.size());
      if (close != std::string::npos) {
        const size_t end = close + call_close.size();
        if (std::optional<tool_call> call = parse_call_block(std::string_view(buf_).substr(0, end), opt_.tools)) {
          drop_held_space();
          call->id = opt_.call_id_prefix + std::to_string(n_calls_++);
          out.push_back({delta_kind::tool_call, "", std::move(*call)});
          skip_space_ = true;
        } else {
          emit(delta_kind::content, std::string_view(buf_).substr(0, end), out);
        }
        buf_.erase(0, end);
        state_ = state::content;
        continue;
      }
      if (last) emit(delta_kind::content, buf_, out), buf_.clear();  // never closed: content as written
    }
    if (last && !held_space_.empty()) {  // content keeps its trailing whitespace unless a call follows
      if (!out.empty() && out.back().kind == delta_kind::content)
        out.back().text += held_space_;
      else
        out.push_back({delta_kind::content, held_space_, {}});
      held_space_.clear();
    }
    return;
  }
}

// Text of one kind, leading whitespace dropped where skip_space_ says, trailing whitespace held until
// something else follows; consecutive deltas of the same kind are merged.
void stream_splitter::emit(delta_kind kind, std::string_view text, std::vector<stream_delta>& out) {
  if (skip_space_) {
    text = lstrip(text);
    if (text.empty()) return;
    skip_space_ = false;
  }
  const size_t last = text.find_last_not_of(space_chars);
  if (last == std::string_view::npos) {
    held_space_ += text;
    return;
  }
  std::string piece = std::move(held_space_);
  piece += text.substr(0, last + 1);
  held_space_ = std::string(text.substr(last + 1));
  if (!out.empty() && out.back().kind == kind)
    out.back().text += piece;
  else
    out.push_back({kind, std::move(piece), {}});
}

}  // namespace q35::server
