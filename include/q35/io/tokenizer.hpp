// The Qwen3.5 tokenizer: byte-level BPE (`tokenizer.ggml.model = gpt2`) with the `qwen35`
// pre-tokenizer and whole-token matching of special tokens, built from the vocabulary, token types
// and merges of a GGUF file; decoding back to UTF-8 bytes. Host-only; needs libpcre2-8.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "q35/io/bpe.hpp"
#include "q35/io/byte_unicode.hpp"
#include "q35/io/pretokenizer.hpp"
#include "q35/io/special_tokens.hpp"
#include "q35/io/tokenizer_error.hpp"
#include "q35/io/utf8.hpp"

namespace q35::io {

// `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class token_type : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

struct special_ids {
  std::optional<int32_t> bos, eos, pad;
};

class tokenizer {
 public:
  // tokens: token texts in GPT-2's byte-mapped form (normal tokens) or verbatim (special tokens);
  // types: one per token; merges: "left right" pairs in rank order. Throws tokenizer_error on an
  // inconsistent vocabulary (a merge whose parts or result are not tokens, ids out of range).
  tokenizer(std::vector<std::string> tokens, std::vector<token_type> types, const std::vector<std::string>& merges,
            special_ids ids = {})
      : texts_(std::move(tokens)), types_(std::move(types)), ids_(ids) {
    if (texts_.empty()) throw tokenizer_error("the vocabulary is empty");
    if (texts_.size() > size_t(INT32_MAX))
      throw tokenizer_error("the vocabulary has " + std::to_string(texts_.size()) +
                            " tokens, more than int32 ids hold");
    if (types_.size() != texts_.size())
      throw tokenizer_error("token_type has " + std::to_string(types_.size()) + " entries but the vocabulary has " +
                            std::to_string(texts_.size()) + " tokens");
    check_special("bos", ids_.bos);
    check_special("eos", ids_.eos);
    check_special("pad", ids_.pad);
    pieces_.resize(texts_.size());
    by_text_.reserve(texts_.size());
    std::vector<special_token_splitter::entry> specials;
    for (size_t i = 0; i < texts_.size(); ++i) {
      const auto id = int32_t(i);
      by_text_[texts_[i]] = id;  // a duplicated text resolves to its last id, as in llama.cpp
      switch (types_[i]) {
        case token_type::normal:
          pieces_[i] = mapped_to_bytes(texts_[i]);
          break;
        case token_type::control:
        case token_type::unknown:
          specials.push_back({texts_[i], id, false});
          break;
        case token_type::user_defined:
          specials.push_back({texts_[i], id, true});
          break;
        case token_type::undefined:
        case token_type::unused:
        case token_type::byte:
          break;
        default:
          throw tokenizer_error("token " + std::to_string(i) + " has unknown token type " +
                                std::to_string(int(types_[i])));
      }
    }
    specials_ = special_token_splitter(std::move(specials));
    for (int b = 0; b < 256; ++b) {
      const auto it = by_text_.find(bytes_to_mapped(std::string(1, char(b))));
      byte_token_[size_t(b)] = it == by_text_.end() ? -1 : it->second;
    }
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) add_merge(merges[rank], int32_t(rank));
    for (const char* eog : {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
      if (const auto id = find(eog)) eog_.push_back(*id);
    if (ids_.eos) eog_.push_back(*ids_.eos);
    std::sort(eog_.begin(), eog_.end());
    eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  }

  // Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/padding_token_id} from an
  // opened GGUF file (q35::io::gguf_file, or anything with the same metadata accessors).
  template <class GgufFile>
  static tokenizer from_gguf(const GgufFile& file) {
    const auto require = [&](const std::string& key) {
      if (!file.has(key)) throw tokenizer_error("the file has no '" + key + "' (needed to build the tokenizer)");
    };
    require("tokenizer.ggml.model");
    if (const std::string model = file.get_string("tokenizer.ggml.model"); model != "gpt2")
      throw tokenizer_error("tokenizer.ggml.model is '" + model + "', but only 'gpt2' (byte-level BPE) is supported");
    require("tokenizer.ggml.pre");
    if (const std::string pre = file.get_string("tokenizer.ggml.pre"); pre != "qwen35")
      throw tokenizer_error("tokenizer.ggml.pre is '" + pre + "', but only 'qwen35' is supported");
    require("tokenizer.ggml.tokens");
    require("tokenizer.ggml.merges");
    std::vector<std::string> tokens;
    for (std::string_view t : file.get_string_array("tokenizer.ggml.tokens")) tokens.emplace_back(t);
    std::vector<token_type> types(tokens.size(), token_type::normal);  // llama.cpp's default without the key
    if (file.has("tokenizer.ggml.token_type")) {
      const auto raw = file.get_int_array("tokenizer.ggml.token_type");
      types.resize(raw.size());
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] < 0 || raw[i] > int64_t(token_type::byte))
          throw tokenizer_error("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(raw[i]) +
                                " is not a token type (0-6)");
        types[i] = token_type(raw[i]);
      }
    }
    std::vector<std::string> merges;
    for (std::string_view m : file.get_string_array("tokenizer.ggml.merges")) merges.emplace_back(m);
    special_ids ids;
    const auto read_id = [&](const char* key, std::optional<int32_t>& out) {
      if (!file.has(key)) return;
      const uint64_t v = file.get_uint(key);
      if (v >= tokens.size())
        throw tokenizer_error(std::string(key) + " = " + std::to_string(v) + " is outside the vocabulary of " +
                              std::to_string(tokens.size()) + " tokens");
      out = int32_t(v);
    };
    read_id("tokenizer.ggml.bos_token_id", ids.bos);
    read_id("tokenizer.ggml.eos_token_id", ids.eos);
    read_id("tokenizer.ggml.padding_token_id", ids.pad);
    return tokenizer(std::move(tokens), std::move(types), merges, ids);
  }

  int32_t n_vocab() const { return int32_t(texts_.size()); }
  size_t n_merges() const { return merges_.size(); }
  const special_ids& specials() const { return ids_; }
  bool uses_jit() const { return pre_.uses_jit(); }

  // The token's text as stored in the vocabulary (byte-mapped form for normal tokens).
  const std::string& token_text(int32_t id) const { return texts_[checked(id)]; }
  token_type type(int32_t id) const { return types_[checked(id)]; }
  // The id whose stored text is exactly `text`, if any.
  std::optional<int32_t> find(std::string_view text) const {
    const auto it = by_text_.find(text);
    return it == by_text_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  // End of generation: the eos id and the end-of-text / turn / FIM tokens llama.cpp stops on (spec §3.5).
  bool is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // Token ids of `text` (no BOS is added). With parse_special, special tokens written in the text
  // (`<|im_start|>`) become their ids; without, CONTROL tokens are encoded as plain text
  // (USER_DEFINED ones such as `<think>` still match, as in llama.cpp). Invalid UTF-8 bytes are
  // encoded as U+FFFD, as llama.cpp does.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const {
    std::vector<int32_t> out;
    std::vector<int32_t> symbols;
    for (const text_fragment& frag : specials_.split(text, parse_special)) {
      if (frag.token >= 0) {
        out.push_back(frag.token);
        continue;
      }
      const std::string clean = is_valid_utf8(frag.text) ? std::string(frag.text) : sanitize_utf8(frag.text);
      for (std::string_view word : pre_.split(clean)) {
        symbols.clear();
        for (unsigned char b : word) {
          if (byte_token_[b] < 0)
            throw tokenizer_error("the vocabulary has no token for byte 0x" + hex(b) +
                                  " (not a byte-level vocabulary)");
          symbols.push_back(byte_token_[b]);
        }
        merges_.apply(symbols);
        out.insert(out.end(), symbols.begin(), symbols.end());
      }
    }
    return out;
  }

  // The bytes one token stands for. CONTROL and UNKNOWN tokens give their text only with
  // render_special; USER_DEFINED tokens always give their text; UNUSED and BYTE tokens give nothing.
  std::string_view piece(int32_t id, bool render_special = true) const {
    const size_t i = checked(id);
    switch (types_[i]) {
      case token_type::normal:
        return pieces_[i];
      case token_type::user_defined:
        return texts_[i];
      case token_type::control:
      case token_type::unknown:
        return render_special ? std::string_view(texts_[i]) : std::string_view();
      default:
        return {};
    }
  }

  // The bytes of a token sequence: UTF-8 when the ids came from encode(); a sequence cut in the
  // middle of a character yields its bytes as they are (see stream_decoder for incremental output).
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const {
    std::string out;
    for (int32_t id : ids) out.append(piece(id, render_special));
    return out;
  }

 private:
  size_t checked(int32_t id) const {
    if (id < 0 || id >= n_vocab())
      throw tokenizer_error("token id " + std::to_string(id) + " is out of range: the vocabulary has " +
                            std::to_string(n_vocab()) + " tokens (ids 0.." + std::to_string(n_vocab() - 1) + ")");
    return size_t(id);
  }

  void check_special(const char* name, const std::optional<int32_t>& id) const {
    if (id && (*id < 0 || *id >= int32_t(texts_.size())))
      throw tokenizer_error(std::string(name) + " token id " + std::to_string(*id) + " is outside the vocabulary of " +
                            std::to_string(texts_.size()) + " tokens");
  }

  // "left right" (split at the first space after the first character, as llama.cpp does).
  void add_merge(const std::string& merge, int32_t rank) {
    const auto fail = [&](const std::string& why) {
      throw tokenizer_error("merge " + std::to_string(rank) + " '" + merge + "': " + why);
    };
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) fail("not a 'left right' pair");
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    merged_buf_.assign(left).append(right);
    const auto l = find(left), r = find(right), m = find(merged_buf_);
    if (!l) fail("'" + std::string(left) + "' is not in the vocabulary");
    if (!r) fail("'" + std::string(right) + "' is not in the vocabulary");
    if (!m) fail("the merged token '" + merged_buf_ + "' is not in the vocabulary");
    merges_.add(*l, *r, *m, rank);
  }

  static std::string hex(unsigned char b) {
    const char* digits = "0123456789ABCDEF";
    return {digits[b >> 4], digits[b & 15]};
  }

  std::vector<std::string> texts_;
  std::vector<token_type> types_;
  std::vector<std::string> pieces_;  // decoded bytes of each normal token
  // token text -> id; looked up with string_views, without building strings
  struct text_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, text_hash, std::equal_to<>> by_text_;
  std::string merged_buf_;                 // scratch for add_merge
  std::array<int32_t, 256> byte_token_{};  // id of each single-byte token, -1 if missing
  bpe_merges merges_;
  special_token_splitter specials_;
  regex_splitter pre_;
  special_ids ids_;
  std::vector<int32_t> eog_;  // sorted
};

}  // namespace q35::io
