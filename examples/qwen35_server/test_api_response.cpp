// qwen35_server_api's responses: the chat.completion, text_completion and model list bodies, the SSE
// frames of streamed chat and text completions (role chunk, deltas, finish chunk, usage chunk, [DONE]),
// response ids, and the API key checks (keys_equal, check_bearer). Bodies are parsed back as JSON and
// compared field by field with OpenAI's documented shapes.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "api.hpp"

namespace srv = q35::server;
using nlohmann::json;

namespace {

const srv::response_meta meta{"chatcmpl-abc", 1700000000, "tiny"};

// The JSON objects of a run of SSE frames, and whether it ends in [DONE] (each frame "data: X\n\n").
struct frames {
  std::vector<json> objects;
  bool done = false;
};
frames parse_frames(std::string_view sse) {
  frames f;
  while (!sse.empty()) {
    REQUIRE(sse.substr(0, 6) == "data: ");
    const size_t end = sse.find("\n\n");
    REQUIRE(end != std::string_view::npos);
    const std::string_view payload = sse.substr(6, end - 6);
    CHECK_FALSE(f.done);  // nothing after [DONE]
    if (payload == "[DONE]")
      f.done = true;
    else
      f.objects.push_back(json::parse(payload));
    sse.remove_prefix(end + 2);
  }
  return f;
}

void check_head(const json& j, const char* object) {
  CHECK(j["id"] == meta.id);
  CHECK(j["object"] == object);
  CHECK(j["created"] == meta.created);
  CHECK(j["model"] == meta.model);
}

}  // namespace

TEST_CASE("server api: chat.completion bodies") {
  const srv::usage_info usage{12, 5};
  SUBCASE("text and reasoning") {
    srv::parsed_output out;
    out.content = "The answer is 4.", out.reasoning_content = "2 + 2";
    const json j = json::parse(srv::chat_completion_body(meta, out, srv::finish_reason::stop, usage));
    check_head(j, "chat.completion");
    REQUIRE(j["choices"].size() == 1);
    const json& c = j["choices"][0];
    CHECK(c["index"] == 0);
    CHECK(c["finish_reason"] == "stop");
    CHECK(c["logprobs"].is_null());
    CHECK(c["message"] == json{{"role", "assistant"}, {"content", "The answer is 4."}, {"reasoning_content", "2 + 2"}});
    CHECK(j["usage"] == json{{"prompt_tokens", 12}, {"completion_tokens", 5}, {"total_tokens", 17}});
  }
  SUBCASE("no reasoning: the field is absent; an empty text is an empty string") {
    const json j = json::parse(srv::chat_completion_body(meta, {}, srv::finish_reason::length, usage));
    CHECK(j["choices"][0]["message"] == json{{"role", "assistant"}, {"content", ""}});
    CHECK(j["choices"][0]["finish_reason"] == "length");
  }
  SUBCASE("tool calls: content null, finish_reason tool_calls") {
    srv::parsed_output out;
    out.tool_calls = {{"call_1", "get_weather", R"({"city": "Paris"})"}, {"call_2", "run", "{}"}};
    const json j = json::parse(srv::chat_completion_body(meta, out, srv::finish_reason::stop, usage));
    const json& m = j["choices"][0]["message"];
    CHECK(m["content"].is_null());
    CHECK_FALSE(m.contains("reasoning_content"));
    REQUIRE(m["tool_calls"].size() == 2);
    CHECK(m["tool_calls"][0] == json{{"id", "call_1"},
                                     {"type", "function"},
                                     {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}}});
    CHECK(m["tool_calls"][1]["function"]["name"] == "run");
    CHECK(j["choices"][0]["finish_reason"] == "tool_calls");
    // a generation cut by max_tokens stays "length"; text beside calls stays text
    out.content = "Let me check.";
    const json k = json::parse(srv::chat_completion_body(meta, out, srv::finish_reason::length, usage));
    CHECK(k["choices"][0]["finish_reason"] == "length");
    CHECK(k["choices"][0]["message"]["content"] == "Let me check.");
  }
}

TEST_CASE("server api: logprobs in OpenAI's chat and completions shapes, whole and streamed") {
  // "Hé" split inside the é: the first token's bytes are not whole UTF-8
  std::vector<srv::token_logprob> lps(2);
  lps[0].token = "H\xc3", lps[0].logprob = -0.25, lps[0].text_offset = 0;
  lps[0].top = {{"H\xc3", -0.25}, {"Hi", -1.5}};
  lps[1].token = "\xa9", lps[1].logprob = -INFINITY, lps[1].text_offset = 2;
  const json chat_tokens = json::array(
      {{{"token", "H\xef\xbf\xbd"},
        {"logprob", -0.25},
        {"bytes", {72, 195}},
        {"top_logprobs",
         {{{"token", "H\xef\xbf\xbd"}, {"logprob", -0.25}, {"bytes", {72, 195}}},
          {{"token", "Hi"}, {"logprob", -1.5}, {"bytes", {72, 105}}}}}},
       {{"token", "\xef\xbf\xbd"}, {"logprob", -9999.0}, {"bytes", {169}}, {"top_logprobs", json::array()}}});
  const json chat = json::parse(srv::chat_completion_body(meta, {}, srv::finish_reason::stop, {1, 2}, &lps));
  CHECK(chat["choices"][0]["logprobs"] == json{{"content", chat_tokens}, {"refusal", nullptr}});
  const json text = json::parse(srv::completion_body(meta, "H\xc3\xa9", srv::finish_reason::stop, {1, 2}, &lps));
  CHECK(text["choices"][0]["logprobs"] ==
        json{{"tokens", {"H\xef\xbf\xbd", "\xef\xbf\xbd"}},
             {"token_logprobs", {-0.25, -9999.0}},
             {"top_logprobs", {{{"H\xef\xbf\xbd", -0.25}, {"Hi", -1.5}}, json::object()}},
             {"text_offset", {0, 2}}});
  // streamed: a delta's chunk and the finish chunk carry them
  srv::chat_stream cs(meta, false);
  srv::stream_delta d;
  d.text = "H\xc3\xa9";
  const frames f = parse_frames(cs.delta(d, &lps) + cs.end(srv::finish_reason::stop, {1, 2}, &lps));
  REQUIRE(f.objects.size() == 2);
  CHECK(f.objects[0]["choices"][0]["logprobs"]["content"] == chat_tokens);
  CHECK(f.objects[1]["choices"][0]["logprobs"]["content"] == chat_tokens);
  CHECK(parse_frames(cs.delta(d)).objects[0]["choices"][0]["logprobs"].is_null());
  const srv::completion_stream ts(meta, false);
  const frames g = parse_frames(ts.delta("x", &lps) + ts.end(srv::finish_reason::length, {1, 2}, nullptr));
  CHECK(g.objects[0]["choices"][0]["logprobs"]["token_logprobs"] == json{-0.25, -9999.0});
  CHECK(g.objects[1]["choices"][0]["logprobs"].is_null());
  // an echoed prompt's first token: null log-probability and top list
  std::vector<srv::token_logprob> echoed(1);
  echoed[0].token = "A", echoed[0].known = false;
  echoed.push_back(lps[0]);
  const json e = json::parse(srv::completion_body(meta, "AH\xc3", srv::finish_reason::length, {2, 0}, &echoed));
  CHECK(e["choices"][0]["logprobs"]["token_logprobs"] == json{nullptr, -0.25});
  CHECK(e["choices"][0]["logprobs"]["top_logprobs"] == json{nullptr, {{"H\xef\xbf\xbd", -0.25}, {"Hi", -1.5}}});
}

TEST_CASE("server api: several choices, whole and streamed") {
  std::vector<srv::text_choice> texts{{"a", srv::finish_reason::stop, nullptr},
                                      {"bc", srv::finish_reason::length, nullptr}};
  const json t = json::parse(srv::completion_body(meta, texts, {3, 5}));
  REQUIRE(t["choices"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(t["choices"][i]["index"] == i);
    CHECK(t["choices"][i]["text"] == texts[size_t(i)].text);
  }
  CHECK(t["choices"][1]["finish_reason"] == "length");
  CHECK(t["usage"]["completion_tokens"] == 5);
  srv::parsed_output first, second;
  first.content = "x", second.content = "y";
  const std::vector<srv::chat_choice> chats{{first, srv::finish_reason::stop, nullptr},
                                            {second, srv::finish_reason::stop, nullptr}};
  const json c = json::parse(srv::chat_completion_body(meta, chats, {1, 2}));
  REQUIRE(c["choices"].size() == 2);
  CHECK(c["choices"][1]["index"] == 1);
  CHECK(c["choices"][1]["message"]["content"] == "y");
  // a stream per choice: its index in every chunk; finish() + close() is end()
  srv::chat_stream cs(meta, true, 3);
  srv::stream_delta d;
  d.text = "z";
  const frames f = parse_frames(cs.begin() + cs.delta(d) + cs.finish(srv::finish_reason::stop));
  REQUIRE(f.objects.size() == 3);
  for (const json& o : f.objects) CHECK(o["choices"][0]["index"] == 3);
  CHECK(cs.finish(srv::finish_reason::length) + cs.close({1, 2}) == cs.end(srv::finish_reason::length, {1, 2}));
  const srv::completion_stream ts(meta, false, 2);
  CHECK(parse_frames(ts.delta("q")).objects[0]["choices"][0]["index"] == 2);
  CHECK(ts.finish(srv::finish_reason::stop) + ts.close({1, 1}) == ts.end(srv::finish_reason::stop, {1, 1}));
}

TEST_CASE("server api: text_completion and model list bodies") {
  const json j = json::parse(srv::completion_body(meta, "abc\n\"d\"", srv::finish_reason::length, {3, 4}));
  check_head(j, "text_completion");
  CHECK(j["choices"] ==
        json::array({{{"text", "abc\n\"d\""}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", "length"}}}));
  CHECK(j["usage"]["total_tokens"] == 7);

  const std::vector<std::string> ids = {"a.gguf", "b"};
  const json m = json::parse(srv::models_body(ids, 42));
  CHECK(m == json{{"object", "list"},
                  {"data",
                   {{{"id", "a.gguf"}, {"object", "model"}, {"created", 42}, {"owned_by", "q35"}},
                    {{"id", "b"}, {"object", "model"}, {"created", 42}, {"owned_by", "q35"}}}}});
  CHECK(json::parse(srv::models_body({}, 1))["data"] == json::array());
}

TEST_CASE("server api: SSE frames of a streamed chat completion") {
  CHECK(srv::sse_event("{}") == "data: {}\n\n");
  CHECK(srv::sse_done == "data: [DONE]\n\n");
  for (const bool include_usage : {false, true}) {
    CAPTURE(include_usage);
    srv::chat_stream s(meta, include_usage);
    std::string sse = s.begin();
    sse += s.delta({srv::delta_kind::reasoning, "hmm", {}});
    CHECK(s.delta({srv::delta_kind::content, "", {}}).empty());  // nothing to send: no frame
    sse += s.delta({srv::delta_kind::content, "It is ", {}});
    sse += s.delta({srv::delta_kind::tool_call, "", {"call_a", "get_weather", R"({"city":"Oslo"})"}});
    sse += s.delta({srv::delta_kind::tool_call, "", {"call_b", "run", "{}"}});
    sse += s.end(srv::finish_reason::stop, {7, 9});
    const frames f = parse_frames(sse);
    CHECK(f.done);
    REQUIRE(f.objects.size() == (include_usage ? 7u : 6u));
    for (size_t i = 0; i < f.objects.size(); ++i) {
      check_head(f.objects[i], "chat.completion.chunk");
      // every chunk says "usage": null when the usage comes at the end, and has no usage otherwise
      if (include_usage && i + 1 < f.objects.size()) CHECK(f.objects[i]["usage"].is_null());
      if (!include_usage) CHECK_FALSE(f.objects[i].contains("usage"));
    }
    auto delta = [&](size_t i) { return f.objects[i]["choices"][0]["delta"]; };
    CHECK(delta(0) == json{{"role", "assistant"}, {"content", ""}});
    CHECK(delta(1) == json{{"reasoning_content", "hmm"}});
    CHECK(delta(2) == json{{"content", "It is "}});
    CHECK(delta(3)["tool_calls"] ==
          json::array({{{"index", 0},
                        {"id", "call_a"},
                        {"type", "function"},
                        {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Oslo"})"}}}}}));
    CHECK(delta(4)["tool_calls"][0]["index"] == 1);
    for (size_t i = 0; i < 5; ++i) CHECK(f.objects[i]["choices"][0]["finish_reason"].is_null());
    // the finish chunk: an empty delta, and stop turned into tool_calls since calls were streamed
    CHECK(delta(5) == json::object());
    CHECK(f.objects[5]["choices"][0]["finish_reason"] == "tool_calls");
    if (include_usage) {
      CHECK(f.objects[6]["choices"] == json::array());
      CHECK(f.objects[6]["usage"] == json{{"prompt_tokens", 7}, {"completion_tokens", 9}, {"total_tokens", 16}});
    }
  }
  // without calls, stop stays stop
  srv::chat_stream plain(meta, false);
  const frames f = parse_frames(plain.end(srv::finish_reason::stop, {}));
  REQUIRE(f.objects.size() == 1);
  CHECK(f.objects[0]["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("server api: SSE frames of a streamed text completion") {
  for (const bool include_usage : {false, true}) {
    CAPTURE(include_usage);
    const srv::completion_stream s(meta, include_usage);
    CHECK(s.delta("").empty());
    const frames f = parse_frames(s.delta("Once ") + s.delta("upon") + s.end(srv::finish_reason::length, {2, 2}));
    CHECK(f.done);
    REQUIRE(f.objects.size() == (include_usage ? 4u : 3u));
    for (size_t i = 0; i < f.objects.size(); ++i) check_head(f.objects[i], "text_completion");
    CHECK(f.objects[0]["choices"][0]["text"] == "Once ");
    CHECK(f.objects[1]["choices"][0]["text"] == "upon");
    CHECK(f.objects[1]["choices"][0]["finish_reason"].is_null());
    CHECK(f.objects[2]["choices"][0]["text"] == "");
    CHECK(f.objects[2]["choices"][0]["finish_reason"] == "length");
    if (include_usage) CHECK(f.objects[3]["usage"]["total_tokens"] == 4);
  }
}

TEST_CASE("server api: response ids") {
  const std::string a = srv::new_id("chatcmpl-"), b = srv::new_id("chatcmpl-");
  REQUIRE(a.size() == 9 + 24);
  CHECK(a.substr(0, 9) == "chatcmpl-");
  for (const char c : a.substr(9)) CHECK(std::isalnum(static_cast<unsigned char>(c)));
  CHECK(a != b);  // 62^24 ids: a repeat means the random source is broken
}

TEST_CASE("server api: keys_equal and check_bearer") {
  CHECK(srv::keys_equal("", ""));
  CHECK(srv::keys_equal("sk-123", "sk-123"));
  CHECK_FALSE(srv::keys_equal("sk-123", "sk-124"));
  CHECK_FALSE(srv::keys_equal("sk-123", "sk-12"));  // a prefix
  CHECK_FALSE(srv::keys_equal("sk-12", "sk-123"));
  CHECK_FALSE(srv::keys_equal("", "x"));
  CHECK_FALSE(srv::keys_equal(std::string_view("a\0", 2), "a"));  // a trailing NUL is a difference
  CHECK_FALSE(srv::keys_equal("Xk-123", "sk-123"));               // the first byte differs

  CHECK(srv::check_bearer("Bearer sk-123", "sk-123"));
  CHECK(srv::check_bearer("bearer sk-123", "sk-123"));          // the scheme is case-insensitive
  CHECK(srv::check_bearer("  BEARER \t sk-123 \t", "sk-123"));  // optional whitespace around and between
  CHECK_FALSE(srv::check_bearer("Bearer sk-123", ""));          // an empty key never matches
  CHECK_FALSE(srv::check_bearer("Bearer ", ""));
  CHECK_FALSE(srv::check_bearer("Bearer", "sk-123"));
  CHECK_FALSE(srv::check_bearer("Bearer ", "sk-123"));
  CHECK_FALSE(srv::check_bearer("Bearersk-123", "sk-123"));  // no space after the scheme
  CHECK_FALSE(srv::check_bearer("Basic sk-123", "sk-123"));
  CHECK_FALSE(srv::check_bearer("Token sk-123", "sk-123"));
  CHECK_FALSE(srv::check_bearer("Bearer sk-1234", "sk-123"));
  CHECK_FALSE(srv::check_bearer("Bearer sk-123 extra", "sk-123"));  // the token is everything after the scheme
  CHECK_FALSE(srv::check_bearer("", "sk-123"));
  CHECK_FALSE(srv::check_bearer("sk-123", "sk-123"));
}
