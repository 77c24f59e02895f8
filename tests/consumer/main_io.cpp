// Consumer of the installed q35::io target: opens a GGUF file, tokenizes and detokenizes a prompt.
#include <cstdio>
#include <exception>
#include <string>

#include <q35/io/gguf.hpp>
#include <q35/io/tokenizer.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_io MODEL.gguf\n");
    return 2;
  }
  try {
    const auto file = q35::io::gguf_file::open(argv[1]);
    const auto tok = q35::io::tokenizer::from_gguf(file);
    const std::string text = "Hello, world!";
    const auto ids = tok.encode(text, /*parse_special=*/true);
    const std::string back = tok.decode(ids);
    std::printf("consumer_io: %zu tokens, round trip %s\n", ids.size(), back == text ? "ok" : "FAILED");
    return back == text && !ids.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_io: %s\n", e.what());
    return 1;
  }
}
