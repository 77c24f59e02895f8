// Prompt cache file: a header naming the model and the state's sizes, then the blobs, little-endian.
#include "prompt_cache.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace q35::cli {

namespace {

constexpr char magic[8] = {'Q', '3', '5', 'P', 'C', 'A', '0', '1'};

// What must match for a cache to apply: the model file (size, tensor data offset, tensor count) and
// the state layout (kv bytes per token, recurrent bytes, vocabulary).
struct cache_header {
  char magic[8];
  uint64_t model_bytes, model_data_offset, model_tensors;
  uint64_t kv_bytes_total, recurrent_bytes, n_vocab, n_ctx;
  uint64_t n_tokens, kv_blob_bytes, recurrent_blob_bytes, logits_count;
};

cache_header header_for(const io::gguf_file& model, const gen::decoder& dec) {
  cache_header h{};
  std::memcpy(h.magic, magic, 8);
  h.model_bytes = model.file_bytes();
  h.model_data_offset = model.data_offset();
  h.model_tensors = model.tensors().size();
  h.kv_bytes_total = dec.kv_bytes();
  h.recurrent_bytes = dec.recurrent_bytes();
  h.n_ctx = uint64_t(dec.n_ctx());
  return h;
}

template <class T>
void read_exact(std::ifstream& f, std::vector<T>& v, uint64_t n, const std::string& path) {
  if (n > (uint64_t(1) << 40) / sizeof(T))
    throw std::runtime_error(path + ": prompt cache blob size " + std::to_string(n) + " is implausible");
  v.resize(size_t(n));
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(T)));
  if (!f) throw std::runtime_error(path + ": the prompt cache file is truncated");
}

}  // namespace

size_t resume_from_cache(const std::string& path, const io::gguf_file& model, gen::decoder& dec,
                         const std::vector<int32_t>& prompt) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    // a path that cannot be written fails now, before any work
    if (!std::ofstream(path + ".tmp", std::ios::binary | std::ios::trunc))
      throw std::runtime_error("--prompt-cache: cannot write '" + path + ".tmp'");
    std::filesystem::remove(path + ".tmp");
    std::cerr << "[prompt cache: " << path << " does not exist yet; it will hold the state after this prompt]\n";
    return 0;
  }
  cache_header h{};
  f.read(reinterpret_cast<char*>(&h), sizeof h);
  if (!f || std::memcmp(h.magic, magic, 8) != 0) throw std::runtime_error(path + ": not a q35 prompt cache file");
  const cache_header want = header_for(model, dec);
  if (h.model_bytes != want.model_bytes || h.model_data_offset != want.model_data_offset ||
      h.model_tensors != want.model_tensors || h.kv_bytes_total != want.kv_bytes_total ||
      h.recurrent_bytes != want.recurrent_bytes || h.n_ctx != want.n_ctx) {
    std::cerr << "[prompt cache: " << path << " was saved for another model, context size or KV type; not used]\n";
    return 0;
  }
  gen::decoder_state st;
  read_exact(f, st.tokens, h.n_tokens, path);
  if (st.tokens.size() > prompt.size() || !std::equal(st.tokens.begin(), st.tokens.end(), prompt.begin())) {
    std::cerr << "[prompt cache: this prompt does not start with the cached " << st.tokens.size()
              << " tokens (the only checkpoint is at their end); evaluating it whole]\n";
    return 0;
  }
  read_exact(f, st.kv, h.kv_blob_bytes, path);
  read_exact(f, st.recurrent, h.recurrent_blob_bytes, path);
  read_exact(f, st.last_logits, h.logits_count, path);
  if (const status s = dec.load(st); !s.ok()) throw std::runtime_error(path + ": " + s.message());
  std::cerr << "[prompt cache: resumed from the checkpoint at position " << st.tokens.size() << " of " << prompt.size()
            << "]\n";
  return st.tokens.size();
}

void save_cache(const std::string& path, const io::gguf_file& model, const gen::decoder& dec) {
  gen::decoder_state st;
  if (const status s = dec.save(st); !s.ok()) throw std::runtime_error("--prompt-cache: " + s.message());
  cache_header h = header_for(model, dec);
  h.n_tokens = st.tokens.size();
  h.kv_blob_bytes = st.kv.size();
  h.recurrent_blob_bytes = st.recurrent.size();
  h.logits_count = st.last_logits.size();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("--prompt-cache: cannot write '" + tmp + "'");
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.write(reinterpret_cast<const char*>(st.tokens.data()), std::streamsize(st.tokens.size() * 4));
    f.write(reinterpret_cast<const char*>(st.kv.data()), std::streamsize(st.kv.size()));
    f.write(reinterpret_cast<const char*>(st.recurrent.data()), std::streamsize(st.recurrent.size()));
    f.write(reinterpret_cast<const char*>(st.last_logits.data()), std::streamsize(st.last_logits.size() * 4));
    if (!f) throw std::runtime_error("--prompt-cache: writing '" + tmp + "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("--prompt-cache: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  std::cerr << "[prompt cache: saved the checkpoint at position " << st.tokens.size() << " to " << path << "]\n";
}

}  // namespace q35::cli
