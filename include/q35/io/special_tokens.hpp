// Splitting text at special tokens (CONTROL and USER_DEFINED vocabulary entries such as
// `<|im_start|>`), which are matched as whole tokens instead of going through BPE.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace q35::io {

// A piece of the input: raw text for BPE (token < 0) or one whole special token.
struct text_fragment {
  std::string_view text;
  int32_t token = -1;
};

class special_token_splitter {
 public:
  struct entry {
    std::string text;
    int32_t id;
    bool always;  // matched even when special parsing is off (USER_DEFINED tokens, as in llama.cpp and HF)
  };

  special_token_splitter() = default;
  explicit special_token_splitter(std::vector<entry> entries) : entries_(std::move(entries)) {
    std::erase_if(entries_, [](const entry& e) { return e.text.empty(); });
    // Longest first (ties by id, for a deterministic order): a longer token claims its occurrences
    // before a shorter one that it contains, exactly as llama.cpp's tokenizer_st_partition does.
    std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) {
      return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
    });
  }

  size_t size() const { return entries_.size(); }

  // With parse_special, every special token is matched; without it only the `always` ones are, and
  // CONTROL tokens' text is left to BPE like any other text.
  std::vector<text_fragment> split(std::string_view text, bool parse_special) const {
    std::vector<text_fragment> frags;
    if (!text.empty()) frags.push_back({text, -1});
    std::vector<text_fragment> next;
    for (const entry& e : entries_) {
      if (!parse_special && !e.always) continue;
      next.clear();
      bool found = false;
      for (const text_fragment& f : frags) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        size_t pos = 0;
        for (size_t hit; (hit = f.text.find(e.text, pos)) != std::string_view::npos; pos = hit + e.text.size()) {
          if (hit > pos) next.push_back({f.text.substr(pos, hit - pos), -1});
          next.push_back({f.text.substr(hit, e.text.size()), e.id});
          found = true;
        }
        if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1});
      }
      if (found) frags.swap(next);
    }
    return frags;
  }

 private:
  std::vector<entry> entries_;
};

}  // namespace q35::io
