// UTF-8 validation, repair and incomplete-tail detection, and GPT-2's byte <-> unicode mapping.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "q35/io/byte_unicode.hpp"
#include "q35/io/utf8.hpp"

using namespace std::string_literals;

TEST_CASE("utf8: well-formed sequences per RFC 3629") {
  using q35::io::is_valid_utf8;
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("ascii"));
  CHECK(is_valid_utf8("\xc3\xa9"));           // é
  CHECK(is_valid_utf8("\xe5\x8c\x97"));       // 北
  CHECK(is_valid_utf8("\xf0\x9f\x98\x80"));   // 😀
  CHECK(is_valid_utf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  CHECK(!is_valid_utf8("\x80"));              // lone continuation
  CHECK(!is_valid_utf8("\xc0\x80"));          // overlong NUL
  CHECK(!is_valid_utf8("\xe0\x80\x80"));      // overlong
  CHECK(!is_valid_utf8("\xed\xa0\x80"));      // surrogate U+D800
  CHECK(!is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  CHECK(!is_valid_utf8("\xf5\x80\x80\x80"));
  CHECK(!is_valid_utf8("\xe5\x8c"));  // cut short
  CHECK(!is_valid_utf8("\xff"));
}

TEST_CASE("utf8: sanitize replaces each bad byte with U+FFFD and keeps the rest") {
  const std::string fffd = "\xef\xbf\xbd";
  CHECK(q35::io::sanitize_utf8("ok \xc3\xa9") == "ok \xc3\xa9");
  CHECK(q35::io::sanitize_utf8("a\xff"
                               "b") == "a" + fffd + "b");
  CHECK(q35::io::sanitize_utf8("\xe5\x8c"
                               "x") == fffd + fffd + "x");
  CHECK(q35::io::sanitize_utf8("\xed\xa0\x80") == fffd + fffd + fffd);
}

TEST_CASE("utf8: the incomplete tail is a proper prefix of a well-formed sequence") {
  using q35::io::utf8_incomplete_tail;
  CHECK(utf8_incomplete_tail("") == 0);
  CHECK(utf8_incomplete_tail("abc") == 0);
  CHECK(utf8_incomplete_tail("a\xc3") == 1);
  CHECK(utf8_incomplete_tail("a\xc3\xa9") == 0);
  CHECK(utf8_incomplete_tail("\xe5") == 1);
  CHECK(utf8_incomplete_tail("\xe5\x8c") == 2);
  CHECK(utf8_incomplete_tail("\xe5\x8c\x97") == 0);
  CHECK(utf8_incomplete_tail("\xf0\x9f\x98") == 3);
  CHECK(utf8_incomplete_tail("\xf0\x9f\x98\x80") == 0);
  CHECK(utf8_incomplete_tail("\x80\x80") == 0);  // continuation bytes with no lead: never completes
  CHECK(utf8_incomplete_tail("\xe0\x80") == 0);  // overlong start: never completes
  CHECK(utf8_incomplete_tail("\xed\xa0") == 0);  // surrogate start
  CHECK(utf8_incomplete_tail("\xff") == 0);
  CHECK(utf8_incomplete_tail("x\xc3\xa9\xe5") == 1);
}

TEST_CASE("byte mapping: GPT-2's table, a bijection onto printable code points") {
  CHECK(q35::io::bytes_to_mapped(" the") == "\xc4\xa0the");           // Ġthe
  CHECK(q35::io::bytes_to_mapped("\n") == "\xc4\x8a");                // Ċ
  CHECK(q35::io::bytes_to_mapped("\x00"s) == "\xc4\x80");             // Ā
  CHECK(q35::io::bytes_to_mapped("\xad") == "\xc5\x83");              // soft hyphen -> U+0143, the last one
  CHECK(q35::io::bytes_to_mapped("\xc3\xa9") == "\xc3\x83\xc2\xa9");  // é -> Ã©
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string raw(1, char(b));
    const std::string mapped = q35::io::bytes_to_mapped(raw);
    CHECK(q35::io::is_valid_utf8(mapped));
    CHECK(seen.insert(mapped).second);
    CHECK(q35::io::mapped_to_bytes(mapped) == raw);
  }
  CHECK(q35::io::mapped_to_bytes("[PAD7]") == "[PAD7]");
  CHECK(q35::io::mapped_to_bytes("\xe5\x8c\x97") == "\xe5\x8c\x97");  // outside the table: kept
}
