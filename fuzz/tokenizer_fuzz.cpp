// libFuzzer target for the tokenizer (q35/io/tokenizer.hpp) with the vocabulary, merges and special
// tokens of the bundled tiny model (the real Qwen3.5 pre-tokenizer regex on PCRE2, byte-level BPE):
// the text of every server request and every -p prompt goes through it. The first byte picks:
//   0, 1  text (special tokens parsed with 1): ids within the vocabulary; decode(encode(text)) is the
//         text (invalid UTF-8: each bad byte as U+FFFD, sanitize_utf8's result); the stream decoder
//         fed the ids one at a time emits whole characters that concatenate to the decoded text;
//   2     ids (2 bytes each): the stream decoder's output, flushed, equals decode() whatever the ids
//         (tokens that straddle characters, specials rendered or not), and an id outside the
//         vocabulary is a tokenizer_error.
// Any other exception, crash, leak, hang, sanitizer report or broken property (a trap) is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "q35/io/gguf.hpp"
#include "q35/io/stream_decoder.hpp"
#include "q35/io/tokenizer.hpp"
#include "q35/io/utf8.hpp"

namespace io = q35::io;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

std::unique_ptr<io::tokenizer> tok;

void text(std::string_view in, bool parse_special) {
  const std::vector<int32_t> ids = tok->encode(in, parse_special);
  for (const int32_t id : ids) require(id >= 0 && id < tok->n_vocab());
  const std::string clean = io::is_valid_utf8(in) ? std::string(in) : io::sanitize_utf8(in);
  require(tok->decode(ids) == clean);
  io::stream_decoder stream(*tok);
  std::string joined;
  for (const int32_t id : ids) {
    const std::string chunk = stream.push(id);
    require(io::is_valid_utf8(chunk));
    joined += chunk;
  }
  require(stream.flush().empty());  // valid UTF-8 leaves nothing held
  require(joined == clean);
}

void ids(std::string_view in) {
  const bool render_special = !in.empty() && (static_cast<unsigned char>(in[0]) & 1);
  if (!in.empty()) in.remove_prefix(1);
  std::vector<int32_t> v;
  bool bad = false;
  for (size_t i = 0; i + 1 < in.size(); i += 2) {
    const int32_t id = int32_t(static_cast<unsigned char>(in[i]) | static_cast<unsigned char>(in[i + 1]) << 8);
    bad |= id >= tok->n_vocab();
    v.push_back(id);
  }
  io::stream_decoder stream(*tok, render_special);
  std::string joined;
  try {
    for (const int32_t id : v) joined += stream.push(id);
  } catch (const io::tokenizer_error&) {
    require(bad);  // only an id outside the vocabulary is refused
    return;
  }
  require(!bad);
  joined += stream.flush();
  require(joined == tok->decode(v, render_special));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tok = std::make_unique<io::tokenizer>(io::tokenizer::from_gguf(io::gguf_file::open(Q35_FUZZ_TOKENIZER_GGUF)));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
    case 1:
      text(in, data[0] % 3 == 1);
      break;
    default:
      ids(in);
  }
  return 0;
}
