// The merge table of byte-level BPE and the merge loop: repeatedly merge the adjacent pair of lowest
// rank (leftmost on ties) until no pair has a merge. O(n log n) per word with a priority queue and
// lazily dropped stale pairs, so long words cost no quadratic time.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace q35::io {

struct bpe_merge {
  int32_t rank;    // index in tokenizer.ggml.merges: lower merges first
  int32_t merged;  // token id of left + right
};

class bpe_merges {
 public:
  // Registers (left, right) -> merged at `rank`; a pair already present keeps its lower rank.
  void add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
    table_.emplace(key(left, right), bpe_merge{rank, merged});
  }

  std::optional<bpe_merge> find(int32_t left, int32_t right) const {
    const auto it = table_.find(key(left, right));
    if (it == table_.end()) return std::nullopt;
    return it->second;
  }

  size_t size() const { return table_.size(); }
  void reserve(size_t n) { table_.reserve(n); }

  // symbols: the token ids of a word, one per byte on entry; the merged ids on return.
  void apply(std::vector<int32_t>& symbols) const {
    const int n = int(symbols.size());
    if (n < 2) return;
    struct node {
      int32_t id;  // -1 once merged into its left neighbour
      int prev, next;
    };
    struct candidate {
      int32_t rank;
      int left;  // node index of the pair's left symbol: ties go to the leftmost pair
      int32_t left_id, right_id, merged;
      bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::vector<node> nodes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) nodes[size_t(i)] = node{symbols[size_t(i)], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
    const auto push = [&](int left) {
      if (left < 0) return;
      const int right = nodes[size_t(left)].next;
      if (right < 0) return;
      const int32_t l = nodes[size_t(left)].id, r = nodes[size_t(right)].id;
      if (const auto m = find(l, r)) queue.push(candidate{m->rank, left, l, r, m->merged});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
      const candidate c = queue.top();
      queue.pop();
      node& left = nodes[size_t(c.left)];
      if (left.id != c.left_id || left.next < 0) continue;  // stale: the left symbol changed
      node& right = nodes[size_t(left.next)];
      if (right.id != c.right_id) continue;  // stale: the right neighbour changed
      left.id = c.merged;
      right.id = -1;
      left.next = right.next;
      if (right.next >= 0) nodes[size_t(right.next)].prev = c.left;
      push(left.prev);
      push(c.left);
    }
    symbols.clear();
    for (int i = 0; i >= 0; i = nodes[size_t(i)].next) symbols.push_back(nodes[size_t(i)].id);
  }

 private:
  static uint64_t key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

  std::unordered_map<uint64_t, bpe_merge> table_;
};

}  // namespace q35::io
