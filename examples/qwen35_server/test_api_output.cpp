// qwen35_server_api's output side: the output parsers (reasoning, tool calls, stop strings) whole and
// streamed in any pieces, the response bodies and SSE frames, and the API key comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "api.hpp"

namespace srv = q35::server;

TEST_CASE("server api: split_reasoning") {
  auto s = srv::split_reasoning("Let me think.\nYes.\n</think>\n\nThe answer is 4.");
  CHECK(s.reasoning_content == "Let me think.\nYes.");
  CHECK(s.content == "The answer is 4.");
  s = srv::split_reasoning("still thinking\n");  // cut off before </think>
  CHECK(s.reasoning_content == "still thinking");
  CHECK(s.content.empty());
  s = srv::split_reasoning("\n</think>\n\nDirect.");  // empty thinking
  CHECK(s.reasoning_content.empty());
  CHECK(s.content == "Direct.");
  s = srv::split_reasoning("a</think>b</think>c");  // only the first closes the block
  CHECK(s.reasoning_content == "a");
  CHECK(s.content == "b</think>c");
  s = srv::split_reasoning("No thinking here </think>  ", false);
  CHECK(s.reasoning_content.empty());
  CHECK(s.content == "No thinking here </think>  ");
}

namespace {

const std::vector<srv::tool_def> weather_tools = {
    {"get_weather", {{"city", "string"}, {"days", "integer"}, {"zip", "string"}, {"metric", "boolean"}}},
    {"run", {{"code", "string"}, {"options", "object"}}}};

}  // namespace

TEST_CASE("server api: tool calls in Qwen3.5's XML format") {
  const std::string text =
      "I'll check both.\n\n"
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=run>\n<parameter=code>\ndef f(x):\n    return x\n\n</parameter>\n"
      "<parameter=options>\n{\"timeout\": 5, \"env\": [\"a\", \"b\"]}\n</parameter>\n"
      "<parameter=extra>\nnull\n</parameter>\n<parameter=note>\n  plain text, not JSON  \n</parameter>\n"
      "<parameter=quoted>\n\"42\"\n</parameter>\n<parameter=unicode>\nZürich ✓\n</parameter>\n"
      "</function>\n</tool_call>";
  const srv::tool_call_split s = srv::parse_tool_calls(text, weather_tools, "id_");
  CHECK(s.content == "I'll check both.");
  REQUIRE(s.calls.size() == 2);
  CHECK(s.calls[0].id == "id_0");
  CHECK(s.calls[0].name == "get_weather");
  // string-typed parameters stay strings (zip "10001"), others are JSON when they parse, True is a boolean
  CHECK(s.calls[0].arguments == R"({"city":"New York","days":3,"zip":"10001","metric":true})");
  CHECK(s.calls[1].id == "id_1");
  CHECK(s.calls[1].name == "run");
  // one newline on each side belongs to the format; the rest of a multi-line value is kept
  CHECK(s.calls[1].arguments ==
        R"({"code":"def f(x):\n    return x\n","options":{"timeout":5,"env":["a","b"]},"extra":null,)"
        R"("note":"  plain text, not JSON  ","quoted":"42","unicode":"Zürich ✓"})");

  // without schemas: numbers and booleans are JSON, True is not (it is no JSON), a function name unknown
  // to the request is still a call
  const auto untyped = srv::parse_tool_calls(
      "<tool_call>\n<function=f>\n<parameter=a>\n10001\n</parameter>\n<parameter=b>\ntrue\n</parameter>\n"
      "<parameter=c>\nTrue\n</parameter>\n<parameter=d>\n1e999\n</parameter>\n</function>\n</tool_call>");
  REQUIRE(untyped.calls.size() == 1);
  CHECK(untyped.calls[0].id == "call_0");
  CHECK(untyped.calls[0].arguments == R"({"a":10001,"b":true,"c":"True","d":"1e999"})");
  CHECK(untyped.content.empty());

  // compact spacing and no parameters
  const auto tight = srv::parse_tool_calls("<tool_call><function=now></function></tool_call>");
  REQUIRE(tight.calls.size() == 1);
  CHECK(tight.calls[0].arguments == "{}");
}

TEST_CASE("server api: malformed or unterminated tool call blocks stay content as written") {
  const std::vector<std::string> bad = {
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",            // no </function>
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",                    // Qwen2.5's JSON form
      "<tool_call>\n<function=>\n</function>\n</tool_call>",                                // empty name
      "<tool_call>\n<function=a\nb>\n</function>\n</tool_call>",                            // name over two lines
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",             // no </parameter>
      "<tool_call>\n<function=f>\nstray\n</function>\n</tool_call>",                        // text between tags
      "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>",                     // text after </function>
      "Checking.\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>",  // never closed
  };
  for (const std::string& text : bad) {
    CAPTURE(text);
    const auto s = srv::parse_tool_calls(text);
    CHECK(s.calls.empty());
    CHECK(s.content == text);
  }
  // a bad block between good ones stays in place; whitespace next to the good ones goes
  const std::string good = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
  const auto mixed = srv::parse_tool_calls("A \n" + good + "\n" + bad[0] + "\n" + good + "\n B");
  CHECK(mixed.calls.size() == 2);
  CHECK(mixed.content == "A" + bad[0] + "B");
}

TEST_CASE("server api: stop strings end at the one generation meets first") {
  const std::vector<std::string> stop = {"abcd", "bc", "END"};
  CHECK(srv::find_stop("xxabcdyy", stop) == 3u);  // "bc" ends before "abcd" does
  CHECK(srv::find_stop("xxEND bc", stop) == 2u);
  CHECK(!srv::find_stop("nothing", stop));
  CHECK(srv::find_stop("aa", std::vector<std::string>{"a", "aa"}) == 0u);  // same end: the earlier start
  CHECK(!srv::find_stop("text", std::vector<std::string>{""}));

  srv::output_options opt;
  opt.thinking = true;
  opt.stop = {"STOP"};
  const auto out = srv::parse_output("hmm STOP</think>answer", opt);
  CHECK(out.stopped);
  CHECK(out.reasoning_content == "hmm");
  CHECK(out.content.empty());
}

namespace {

std::string call_text(const srv::tool_call& c) { return c.id + "|" + c.name + "|" + c.arguments; }

// Feeds text in the given piece sizes (cycled) and checks the deltas against parse_output.
void check_stream(const std::string& text, const srv::output_options& opt, const std::vector<size_t>& sizes) {
  CAPTURE(text);
  srv::stream_splitter sp(opt);
  std::string reasoning, content;
  std::vector<std::string> calls;
  auto take = [&](const std::vector<srv::stream_delta>& ds) {
    for (const auto& d : ds) {
      CHECK((d.kind == srv::delta_kind::tool_call || !d.text.empty()));
      if (d.kind == srv::delta_kind::reasoning) reasoning += d.text;
      if (d.kind == srv::delta_kind::content) content += d.text;
      if (d.kind == srv::delta_kind::tool_call) calls.push_back(call_text(d.call));
    }
  };
  size_t pos = 0;
  for (size_t i = 0; pos < text.size() && !sp.stopped(); ++i) {
    const size_t n = std::min(sizes[i % sizes.size()], text.size() - pos);
    take(sp.feed(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  take(sp.finish());
  const srv::parsed_output whole = srv::parse_output(text, opt);
  CHECK(reasoning == whole.reasoning_content);
  CHECK(content == whole.content);
  std::vector<std::string> whole_calls;
  for (const auto& c : whole.tool_calls) whole_calls.push_back(call_text(c));
  CHECK(calls == whole_calls);
  CHECK(sp.stopped() == whole.stopped);
}

}  // namespace

TEST_CASE("server api: stream_splitter gives what the whole-text parser gives, in any pieces") {
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
  const std::vector<std::string> texts = {
      "Let me think about </thi this.\nOK.\n</think>\n\nThe answer: 4 < 5 and <tool_ is not a call.  ",
      "  plan \n</think>\n\nChecking.\n\n" + call + "\n" + call + "\n",
      "Reasoning.</think>" + call + "\nDone after the call. \n",
      "Reasoning.</think>\n\n<tool_call>\n<function=f>\nbroken\n</tool_call>\n\n" + call + " tail",
      "Reasoning.</think>Answer <tool_call>\n<function=f>\n never closed",
      "never closes the think block \n\n",
      "</think>",
      "",
      "\n\n \n",
      "Zürich ✓ 日本語</think>\n\nÉtude — «ok» END here END",
      "a<b</c</th</think>x<<tool_call>y</tool_call>z",
      "before STOP after</think>content",
      "thinking</think>\n\nSome answer with a stop ST",
      "thinking</think>\n\nabcSTOP" + call,
      "thinking</think>\n\nThe ###end### marker",
  };
  std::mt19937 rng(7);
  for (const bool thinking : {true, false}) {
    for (const bool tools : {true, false}) {
      for (const auto& stop : {std::vector<std::string>{}, std::vector<std::string>{"STOP", "###end", "END here"}}) {
        srv::output_options opt;
        opt.thinking = thinking;
        opt.tool_calls = tools;
        opt.stop = stop;
        opt.tools = weather_tools;
        for (const std::string& t : texts) {
          check_stream(t, opt, {1});  // one byte at a time (UTF-8 sequences cut too)
          check_stream(t, opt, {3, 1, 7, 2});
          std::vector<size_t> random_sizes(16);
          for (auto& n : random_sizes) n = 1 + rng() % 12;
          check_stream(t, opt, random_sizes);
          check_stream(t, opt, {1 << 20});  // all at once
        }
      }
    }
  }
}

TEST_CASE("server api: stream_splitter releases text as soon as it is certain") {
  srv::output_options opt;
  opt.thinking = true;
  opt.tool_calls = true;
  opt.stop = {"<END>"};
  srv::stream_splitter sp(opt);
  auto d = sp.feed("Thinking hard </th");  // "</th" may become </think>, the space may be trimmed
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == srv::delta_kind::reasoning);
  CHECK(d[0].text == "Thinking hard");
  d = sp.feed("ink>\n\nHello wor");
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == srv::delta_kind::content);
  CHECK(d[0].text == "Hello wor");
  d = sp.feed("ld <tool");  // may become <tool_call>
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == "ld");
  d = sp.feed("s> are <E");  // not a call after all; "<E" may become the stop string
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == " <tools> are");
  d = sp.feed("ND> ignored");  // the stop string: the held space is the content's last character
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == srv::delta_kind::content);
  CHECK(d[0].text == " ");
  CHECK(sp.stopped());
  CHECK(sp.feed("more").empty());
  CHECK(sp.finish().empty());
}

TEST_CASE("server api: stream_splitter emits each tool call when its block closes") {
  srv::output_options opt;
  opt.tool_calls = true;
  opt.tools = weather_tools;
  opt.call_id_prefix = std::string(1, 'c');  // not = "c": GCC 12 warns falsely (-Wrestrict, PR 105329)
  srv::stream_splitter sp(opt);
  CHECK(sp.feed("Sure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome").size() == 1);  // "Sure."
  CHECK(sp.feed("\n</parameter>\n</function>\n").empty());
  const auto d = sp.feed("</tool_call>\n");
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == srv::delta_kind::tool_call);
  CHECK(d[0].call.id == "c0");
  CHECK(d[0].call.name == "get_weather");
  CHECK(d[0].call.arguments == R"({"city":"Rome"})");
  CHECK(sp.finish().empty());  // the newline after the call is the format's
}
