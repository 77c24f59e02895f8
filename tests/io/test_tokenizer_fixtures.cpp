// The tokenizer built from the GGUF fixtures against external references: llama.cpp's token ids
// for every prompt of every tests/data/ref_*.json, and the ids of the independent Python tokenizer
// (shared/fixtures/qwen35_reference.py, which agrees with llama.cpp on all those prompts) for the
// multilingual corpus in tests/data/tokenizer_corpus.json (made by scripts/make_tokenizer_corpus.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/ref_cases.hpp"
#include "io/tokenizer_test_util.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/stream_decoder.hpp"
#include "q35/io/tokenizer.hpp"

namespace {

const std::string data_dir = Q35_TEST_DATA_DIR;

const q35::io::tokenizer& fixture_tokenizer() {
  static const q35::io::tokenizer tok =
      q35::io::tokenizer::from_gguf(q35::io::gguf_file::open(data_dir + "/tiny_dense_q4km.gguf"));
  return tok;
}

std::vector<std::string> ref_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(data_dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("ref_") && name.ends_with(".json")) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("fixture vocabulary: size, special tokens and end-of-generation ids (fixtures README)") {
  const auto& tok = fixture_tokenizer();
  CHECK(tok.n_vocab() == 512);
  CHECK(tok.find("<|endoftext|>") == 507);
  CHECK(tok.find("<|im_start|>") == 508);
  CHECK(tok.find("<|im_end|>") == 509);
  CHECK(tok.find("<think>") == 510);
  CHECK(tok.find("</think>") == 511);
  CHECK(tok.specials().eos == 509);
  CHECK(tok.specials().bos == 507);
  CHECK(tok.is_eog(509));
  CHECK(tok.is_eog(507));
  CHECK(!tok.is_eog(508));
  CHECK(!tok.is_eog(510));
  CHECK(tok.uses_jit());
}

TEST_CASE("every ref_*.json prompt tokenizes to llama.cpp's ids, and decodes back") {
  const auto files = ref_files();
  REQUIRE(files.size() >= 7);
  for (const auto& gguf : {"tiny_dense_q4km.gguf", "tiny_moe_q4km.gguf", "tiny_interleaved_q4km.gguf"}) {
    CAPTURE(gguf);  // all fixtures share the vocabulary: each file's tokenizer must give the same ids
    const auto tok = q35::io::tokenizer::from_gguf(q35::io::gguf_file::open(data_dir + "/" + gguf));
    size_t n_cases = 0;
    for (const auto& file : files) {
      for (const auto& c : q35::test::read_ref_cases(file)) {
        CAPTURE(file);
        CAPTURE(c.prompt);
        CHECK(tok.encode(c.prompt) == c.tokens);
        CHECK(tok.decode(c.tokens) == c.prompt);
        ++n_cases;
      }
    }
    CHECK(n_cases == 3 * files.size());
  }
}

TEST_CASE("llama.cpp's greedy continuations stream-decode to the same bytes as a whole decode") {
  const auto& tok = fixture_tokenizer();
  for (const auto& file : ref_files()) {
    for (const auto& c : q35::test::read_ref_cases(file)) {
      CAPTURE(file);
      REQUIRE(c.greedy.size() == 16);
      q35::io::stream_decoder stream(tok);
      std::string joined;
      std::vector<size_t> cuts;
      for (int32_t id : c.greedy) {
        joined += stream.push(id);
        cuts.push_back(joined.size());
      }
      joined += stream.flush();
      CHECK(!q35::test::cuts_inside_a_character(joined, cuts));
      CHECK(joined == tok.decode(c.greedy));
    }
  }
}

TEST_CASE("multilingual corpus: ids equal the Python reference tokenizer's; decode(encode(text)) == text") {
  const auto& tok = fixture_tokenizer();
  const auto cases = q35::test::read_ref_cases(data_dir + "/tokenizer_corpus.json");
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    CAPTURE(c.prompt);
    CHECK(tok.encode(c.prompt) == c.tokens);
    CHECK(tok.decode(tok.encode(c.prompt)) == c.prompt);
  }
  for (const std::string& text : q35::test::multilingual_corpus()) {
    CAPTURE(text);
    const auto ids = tok.encode(text);
    CHECK(tok.decode(ids) == text);
    CHECK(tok.decode(tok.encode(text, false)) == text);
    q35::io::stream_decoder stream(tok);
    std::string joined;
    for (int32_t id : ids) {
      const std::string chunk = stream.push(id);
      CHECK(q35::io::is_valid_utf8(chunk));
      joined += chunk;
    }
    CHECK(joined == text);
  }
}

TEST_CASE("fixture vocabulary: special-token parsing on and off") {
  const auto& tok = fixture_tokenizer();
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const auto on = tok.encode(text);
  CHECK(on.front() == 508);
  CHECK(on.back() == 509);
  const auto off = tok.encode(text, false);
  for (int32_t id : off) CHECK(tok.type(id) == q35::io::token_type::normal);
  CHECK(tok.decode(off) == text);
  CHECK(tok.decode(on, false) == "user\nhi");
  // <think> is USER_DEFINED in the fixtures: matched whether or not special parsing is on.
  CHECK(tok.encode("<think>", false) == std::vector<int32_t>{510});
}

// The fixture's tokenizer metadata, editable: from_gguf takes any type with gguf_file's accessors.
struct editable_metadata {
  std::map<std::string, std::string, std::less<>> strings;
  std::map<std::string, uint64_t, std::less<>> uints;
  std::map<std::string, std::vector<std::string>, std::less<>> string_arrays;
  std::map<std::string, std::vector<int64_t>, std::less<>> int_arrays;

  static editable_metadata from_fixture() {
    const auto f = q35::io::gguf_file::open(data_dir + "/tiny_dense_q4km.gguf");
    editable_metadata m;
    for (const char* k : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) m.strings[k] = f.get_string(k);
    for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"}) m.uints[k] = f.get_uint(k);
    for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
      for (auto v : f.get_string_array(k)) m.string_arrays[k].emplace_back(v);
    m.int_arrays["tokenizer.ggml.token_type"] = f.get_int_array("tokenizer.ggml.token_type");
    return m;
  }
  void erase(std::string_view k) {
    if (auto it = strings.find(k); it != strings.end()) strings.erase(it);
    if (auto it = uints.find(k); it != uints.end()) uints.erase(it);
    if (auto it = string_arrays.find(k); it != string_arrays.end()) string_arrays.erase(it);
    if (auto it = int_arrays.find(k); it != int_arrays.end()) int_arrays.erase(it);
  }
  bool has(std::string_view k) const {
    return strings.count(k) || uints.count(k) || string_arrays.count(k) || int_arrays.count(k);
  }
  std::string get_string(std::string_view k) const { return strings.find(k)->second; }
  uint64_t get_uint(std::string_view k) const { return uints.find(k)->second; }
  std::vector<std::string_view> get_string_array(std::string_view k) const {
    const auto& v = string_arrays.find(k)->second;
    return {v.begin(), v.end()};
  }
  std::vector<int64_t> get_int_array(std::string_view k) const { return int_arrays.find(k)->second; }
};

TEST_CASE("from_gguf: the unmodified metadata gives the fixture tokenizer") {
  const auto tok = q35::io::tokenizer::from_gguf(editable_metadata::from_fixture());
  CHECK(tok.n_vocab() == 512);
  CHECK(tok.encode("The quick brown fox") == fixture_tokenizer().encode("The quick brown fox"));
}

TEST_CASE("from_gguf: missing or unusable tokenizer metadata is refused with the key at fault") {
  const auto refused = [](const editable_metadata& m, const std::string& why) {
    CHECK_THROWS_WITH_AS(q35::io::tokenizer::from_gguf(m), doctest::Contains(why.c_str()), q35::io::tokenizer_error);
  };
  for (const char* key :
       {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    CAPTURE(key);
    auto m = editable_metadata::from_fixture();
    m.erase(key);
    refused(m, std::string("no '") + key + "'");
  }
  auto m = editable_metadata::from_fixture();
  m.strings["tokenizer.ggml.model"] = "llama";
  refused(m, "tokenizer.ggml.model is 'llama', but only 'gpt2'");

  m = editable_metadata::from_fixture();
  m.strings["tokenizer.ggml.pre"] = "qwen2";
  refused(m, "tokenizer.ggml.pre is 'qwen2', but only 'qwen35'");

  m = editable_metadata::from_fixture();
  m.int_arrays["tokenizer.ggml.token_type"][5] = 9;
  refused(m, "tokenizer.ggml.token_type[5] = 9");

  m = editable_metadata::from_fixture();
  m.int_arrays["tokenizer.ggml.token_type"].pop_back();
  refused(m, "token_type has 511 entries but the vocabulary has 512");

  m = editable_metadata::from_fixture();
  m.uints["tokenizer.ggml.eos_token_id"] = 512;
  refused(m, "tokenizer.ggml.eos_token_id = 512 is outside the vocabulary of 512");

  m = editable_metadata::from_fixture();
  m.string_arrays["tokenizer.ggml.merges"][3] = "Ġ zzz";
  refused(m, "merge 3 'Ġ zzz': 'zzz' is not in the vocabulary");

  // Without token types every token is normal (llama.cpp's default): special texts become BPE text.
  m = editable_metadata::from_fixture();
  m.erase("tokenizer.ggml.token_type");
  const auto plain = q35::io::tokenizer::from_gguf(m);
  CHECK(plain.encode("<|im_end|>").size() > 1);
}

TEST_CASE("random bytes and code points: decode(encode(x)) == x with invalid bytes as U+FFFD") {
  const auto& tok = fixture_tokenizer();
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) {
      switch (rng() % 4) {
        case 0:
          text += char(rng() % 256);
          break;  // any byte, often invalid UTF-8
        case 1:
          text += " \n\t\r'0a<|>"[rng() % 11];
          break;    // separators, digits, special-token characters
        default: {  // a valid code point from anywhere in Unicode
          char32_t cp = char32_t(rng() % 0x110000);
          if (cp >= 0xD800 && cp < 0xE000) cp = U'\u00e9';
          q35::io::append_utf8(text, cp);
        }
      }
    }
    CAPTURE(trial);
    for (bool parse_special : {true, false}) {
      const auto ids = tok.encode(text, parse_special);
      CHECK(tok.decode(ids) == q35::io::sanitize_utf8(text));
    }
  }
}

TEST_CASE("one tokenizer encodes from several threads at once with the same results") {
  const auto& tok = fixture_tokenizer();
  const auto& corpus = q35::test::multilingual_corpus();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : corpus) expected.push_back(tok.encode(text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < corpus.size(); ++i)
          if (tok.encode(corpus[i]) != expected[i]) ++mismatches[size_t(t)];
    });
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}
