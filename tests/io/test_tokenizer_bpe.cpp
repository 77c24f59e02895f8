// Tokenizer core on hand-made vocabularies: merge order, the qwen35 pre-tokenizer, special tokens,
// decoding, streaming and errors. The fixture vocabulary and llama.cpp's ids are in
// test_tokenizer_fixtures.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/tokenizer_test_util.hpp"
#include "q35/io/pretokenizer.hpp"
#include "q35/io/stream_decoder.hpp"
#include "q35/io/tokenizer.hpp"

namespace {

using q35::io::token_type;
using q35::test::toy_vocab;

// Raw bytes of each id, for readable comparisons.
std::vector<std::string> pieces(const q35::io::tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(tok.piece(id));
  return out;
}

// Textbook BPE on one word, as the Python reference and llama.cpp define it: repeatedly merge the
// pair of lowest rank, the leftmost one among equals, one occurrence at a time. Quadratic; small inputs only.
std::vector<std::string> naive_bpe(const std::string& word,
                                   const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  for (;;) {
    int best = -1;
    size_t at = 0;
    for (size_t j = 0; j + 1 < sym.size(); ++j) {
      const auto it = ranks.find({sym[j], sym[j + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) best = it->second, at = j;
    }
    if (best < 0) return sym;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + std::ptrdiff_t(at) + 1);
  }
}

}  // namespace

TEST_CASE("bpe: lower-ranked merges apply first, leftmost first among equal ranks") {
  const auto tok_bc_first = toy_vocab{{{"b", "c"}, {"a", "b"}}, {}}.build();
  CHECK(pieces(tok_bc_first, tok_bc_first.encode("abc")) == std::vector<std::string>{"a", "bc"});
  const auto tok_ab_first = toy_vocab{{{"a", "b"}, {"b", "c"}}, {}}.build();
  CHECK(pieces(tok_ab_first, tok_ab_first.encode("abc")) == std::vector<std::string>{"ab", "c"});

  const auto tok = toy_vocab{{{"a", "a"}, {"aa", "aa"}}, {}}.build();
  CHECK(pieces(tok, tok.encode("aaa")) == std::vector<std::string>{"aa", "a"});
  CHECK(pieces(tok, tok.encode("aaaaa")) == std::vector<std::string>{"aaaa", "a"});
  CHECK(pieces(tok, tok.encode("aaaaaaa")) == std::vector<std::string>{"aaaa", "aa", "a"});
}

TEST_CASE("bpe: agrees with the textbook algorithm on random vocabularies and words") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    std::vector<std::string> alphabet = {"a", "b", "c"};
    toy_vocab v;
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (int k = 0; k < 40; ++k) {
      const std::string l = alphabet[rng() % alphabet.size()], r = alphabet[rng() % alphabet.size()];
      if (!ranks.emplace(std::pair{l, r}, int(v.merges.size())).second) continue;
      v.merges.emplace_back(l, r);
      if (std::find(alphabet.begin(), alphabet.end(), l + r) == alphabet.end()) alphabet.push_back(l + r);
    }
    const auto tok = v.build();
    for (int w = 0; w < 25; ++w) {
      std::string word;
      for (size_t n = 1 + rng() % 80; n > 0; --n) word += char('a' + rng() % 3);
      CAPTURE(word);
      CHECK(pieces(tok, tok.encode(word)) == naive_bpe(word, ranks));
    }
  }
}

TEST_CASE("bpe: a very long word costs no quadratic time and merges fully") {
  // Merges a+a, aa+aa, ... up to 2^16 a's: a word of 2^20 a's becomes 16 tokens of 2^16.
  toy_vocab v;
  std::string unit = "a";
  for (int k = 0; k < 16; ++k, unit += unit) v.merges.emplace_back(unit, unit);
  const auto tok = v.build();
  const std::string word(size_t(1) << 20, 'a');
  const auto ids = tok.encode(word);
  REQUIRE(ids.size() == 16);
  for (const auto& p : pieces(tok, ids)) CHECK(p.size() == (size_t(1) << 16));
  CHECK(tok.decode(ids) == word);
}

TEST_CASE("pre-tokenizer: qwen35 regex splits (expected words from Python's `regex` module)") {
  const q35::io::regex_splitter pre;
  using words = std::vector<std::string_view>;
  CHECK(pre.split("don't") == words{"don", "'t"});
  CHECK(pre.split("I'LL do it") == words{"I", "'LL", " do", " it"});
  CHECK(pre.split("It's 3.14") == words{"It", "'s", " ", "3", ".", "1", "4"});
  CHECK(pre.split("12345") == words{"1", "2", "3", "4", "5"});
  CHECK(pre.split("a  b") == words{"a", " ", " b"});
  CHECK(pre.split("x\n\ny") == words{"x", "\n\n", "y"});
  CHECK(pre.split("a\r\n\r\nb") == words{"a", "\r\n\r\n", "b"});
  CHECK(pre.split("hello!!!\n") == words{"hello", "!!!\n"});
  CHECK(pre.split("  leading") == words{" ", " leading"});
  CHECK(pre.split("trailing  ") == words{"trailing", "  "});
  CHECK(pre.split("tab\tsep") == words{"tab", "\tsep"});
  CHECK(pre.split("x ++y") == words{"x", " ++", "y"});
  // qwen35 keeps combining marks in the letter run (qwen2 would split before U+0301)
  CHECK(pre.split("cafe\xcc\x81!") == words{"cafe\xcc\x81", "!"});
  CHECK(pre.split("北京 市") == words{"北京", " 市"});
  CHECK(pre.split("مرحبا بالعالم") == words{"مرحبا", " بالعالم"});
  CHECK(pre.split("👩\u200d💻 ok") == words{"👩\u200d💻", " ok"});
  CHECK(pre.split("") == words{});
  CHECK_THROWS_AS(pre.split("bad \xff byte"), q35::io::tokenizer_error);
}

TEST_CASE("pre-tokenizer: the words always concatenate back to the input") {
  const q35::io::regex_splitter pre;
  for (const std::string& text : q35::test::multilingual_corpus()) {
    CAPTURE(text);
    std::string joined;
    for (auto w : pre.split(text)) {
      CHECK(!w.empty());
      joined += w;
    }
    CHECK(joined == text);
  }
}

TEST_CASE("special tokens: whole-token matching, longest first, parsing on and off") {
  toy_vocab v;
  v.merges = {{"h", "i"}};
  v.specials = {{"<|im_start|>", token_type::control},  // 257
                {"<think>", token_type::user_defined},  // 258
                {"<|a|>", token_type::control},         // 259
                {"<|a|>x", token_type::control}};       // 260
  const auto tok = v.build();
  const int32_t hi = 256, im_start = 257, think = 258, a = 259, ax = 260;
  REQUIRE(tok.find("hi") == hi);

  CHECK(tok.encode("<|im_start|>hi<think>") == std::vector<int32_t>{im_start, hi, think});
  CHECK(tok.encode("hi<|a|>x<|a|>") == std::vector<int32_t>{hi, ax, a});
  CHECK(tok.encode("<|im_start|><|im_start|>") == std::vector<int32_t>{im_start, im_start});

  // Parsing off: control tokens are plain text; user-defined ones still match (llama.cpp, HF).
  const auto off = tok.encode("<|im_start|>hi<think>", false);
  REQUIRE(off.size() > 3);
  CHECK(off.back() == think);
  for (size_t i = 0; i + 1 < off.size(); ++i) CHECK(tok.type(off[i]) == token_type::normal);
  CHECK(tok.decode(off) == "<|im_start|>hi<think>");

  // Decoding: control tokens render only when asked; user-defined ones always.
  const std::vector<int32_t> ids = {im_start, hi, think};
  CHECK(tok.decode(ids) == "<|im_start|>hi<think>");
  CHECK(tok.decode(ids, false) == "hi<think>");
}

TEST_CASE("decode(encode(text)) == text on the multilingual corpus (toy byte vocabulary)") {
  const auto tok = toy_vocab{{{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\xc3", "\xa9"}}, {}}.build();
  for (const std::string& text : q35::test::multilingual_corpus()) {
    CAPTURE(text);
    CHECK(tok.decode(tok.encode(text)) == text);
  }
}

TEST_CASE("invalid UTF-8 input is encoded as U+FFFD per bad byte, as llama.cpp does") {
  const auto tok = toy_vocab{}.build();
  CHECK(tok.encode("a\xff"
                   "b") == tok.encode("a\xef\xbf\xbd"
                                      "b"));
  CHECK(tok.encode("\xe5\x8c") == tok.encode("\xef\xbf\xbd\xef\xbf\xbd"));  // a cut-off 3-byte sequence
}

TEST_CASE("streaming decode equals whole decode and never emits part of a character") {
  // Merging a continuation byte with the next lead byte makes tokens that straddle characters.
  const auto tok = toy_vocab{{{"\xa9", "\xc3"}, {"\x97", "\xe4"}}, {}}.build();
  for (const std::string& text : q35::test::multilingual_corpus()) {
    CAPTURE(text);
    const auto ids = tok.encode(text);
    q35::io::stream_decoder stream(tok);
    std::string joined, unheld;
    std::vector<size_t> cuts, unheld_cuts;
    for (int32_t id : ids) {
      const std::string chunk = stream.push(id);
      CHECK(q35::io::is_valid_utf8(chunk));
      joined += chunk;
      cuts.push_back(joined.size());
      unheld += tok.piece(id);
      unheld_cuts.push_back(unheld.size());
    }
    CHECK(stream.flush().empty());
    CHECK(joined == tok.decode(ids));
    CHECK(joined == text);
    CHECK(!q35::test::cuts_inside_a_character(joined, cuts));
    // the check has teeth: emitting each token's bytes at once cuts every multi-byte character
    const bool has_multibyte = std::any_of(text.begin(), text.end(), [](char ch) { return (ch & 0x80) != 0; });
    CHECK(q35::test::cuts_inside_a_character(unheld, unheld_cuts) == has_multibyte);
  }
  const int32_t straddle = *tok.find(q35::io::bytes_to_mapped("\xa9\xc3"));
  q35::io::stream_decoder stream(tok);
  CHECK(stream.push(0xC3).empty());
  CHECK(stream.push(straddle) == "\xc3\xa9");  // é complete, the next lead byte held
  CHECK(stream.held_bytes() == 1);
  CHECK(stream.push(0xA9) == "\xc3\xa9");
  CHECK(stream.push(0xE4).empty());
  CHECK(stream.flush() == "\xe4");  // unfinished at the end: handed over by flush
  CHECK(stream.push('x') == "x");
}

TEST_CASE("errors name what is wrong") {
  const auto tok = toy_vocab{}.build();
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<int32_t>{65, 256}), doctest::Contains("token id 256 is out of range"),
                       q35::io::tokenizer_error);
  CHECK_THROWS_WITH_AS(tok.piece(-1), doctest::Contains("the vocabulary has 256 tokens"), q35::io::tokenizer_error);
  q35::io::stream_decoder stream(tok);
  CHECK(stream.push(0xE4).empty());
  CHECK_THROWS_AS(stream.push(1000), q35::io::tokenizer_error);
  CHECK(stream.held_bytes() == 1);

  std::vector<std::string> tokens = {"a", "b"};
  std::vector<token_type> types = {token_type::normal, token_type::normal};
  CHECK_THROWS_WITH_AS(q35::io::tokenizer(tokens, types, {"a b"}), doctest::Contains("merged token 'ab'"),
                       q35::io::tokenizer_error);
  CHECK_THROWS_WITH_AS(q35::io::tokenizer(tokens, types, {"ab"}), doctest::Contains("not a 'left right' pair"),
                       q35::io::tokenizer_error);
  CHECK_THROWS_WITH_AS(q35::io::tokenizer(tokens, {token_type::normal}, {}), doctest::Contains("token_type has 1"),
                       q35::io::tokenizer_error);
  q35::io::special_ids ids;
  ids.eos = 2;
  CHECK_THROWS_WITH_AS(q35::io::tokenizer(tokens, types, {}, ids), doctest::Contains("eos token id 2"),
                       q35::io::tokenizer_error);
  // A vocabulary without byte tokens cannot encode arbitrary text.
  CHECK_THROWS_WITH_AS(q35::io::tokenizer(tokens, types, {}).encode("c"), doctest::Contains("byte 0x63"),
                       q35::io::tokenizer_error);
}
