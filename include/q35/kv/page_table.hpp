// kv::page_allocator: the host side of the KV pool (sequences, their page lists, a free list,
// reference counts for shared pages); kv::page_table_host: the per-batch CSR page table.
//
// Sequences only ever append, so a full page is never written again. fork(src, dst) therefore shares
// src's full pages with dst (reference counted) and copies only the partly filled last page into a
// fresh page: the copy is queued as a page_copy that kv_pool::copy_pages must run before dst is read
// (take_pending_copies()). Running out of pages is a status; a failed call changes nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "q35/core/status.hpp"
#include "q35/kv/kv_pool.hpp"

namespace q35::kv {

class page_allocator {
 public:
  page_allocator() = default;
  page_allocator(int64_t n_pages, int page_tokens) { reset(n_pages, page_tokens); }

  // Forgets every sequence; all n_pages pages are free.
  void reset(int64_t n_pages, int page_tokens) {
    page_tokens_ = page_tokens;
    refs_.assign(size_t(n_pages), 0);
    free_.clear();
    for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(int32_t(p));  // page 0 is handed out first
    seqs_.clear();
    free_ids_.clear();
    pending_.clear();
  }

  // A new empty sequence; returns its id (ids of freed sequences are reused).
  int add_sequence() {
    if (!free_ids_.empty()) {
      const int id = free_ids_.back();
      free_ids_.pop_back();
      seqs_[size_t(id)] = sequence{true, 0, {}};
      return id;
    }
    seqs_.push_back(sequence{true, 0, {}});
    return int(seqs_.size() - 1);
  }

  // Makes room for new_len tokens in total (new_len >= length(seq)); the length becomes new_len.
  status reserve(int seq, int64_t new_len) {
    Q35_TRY(check_seq(seq, "reserve"));
    sequence& s = seqs_[size_t(seq)];
    if (new_len < s.length)
      return error(status_code::invalid_argument, "page_allocator::reserve: new_len = " + std::to_string(new_len) +
                                                      " is below the sequence length " + std::to_string(s.length));
    const int64_t need = pages_for(new_len) - int64_t(s.pages.size());
    if (need > int64_t(free_.size()))
      return error(status_code::out_of_memory, "kv pool: out of pages: sequence " + std::to_string(seq) + " needs " +
                                                   std::to_string(need) + " more, " + std::to_string(free_.size()) +
                                                   " free");
    for (int64_t i = 0; i < need; ++i) s.pages.push_back(take());
    s.length = new_len;
    return status::success();
  }

  // dst = a new sequence with src's tokens: full pages shared, the partial last page copied (queued).
  status fork(int src, int& dst) {
    Q35_TRY(check_seq(src, "fork"));
    const sequence& s = seqs_[size_t(src)];
    const bool partial = s.length % page_tokens_ != 0;
    if (partial && free_.empty())
      return error(status_code::out_of_memory, "kv pool: out of pages: fork of sequence " + std::to_string(src) +
                                                   " needs 1 page for its partial last page, 0 free");
    sequence d{true, s.length, s.pages};
    for (size_t i = 0; i + (partial ? 1 : 0) < d.pages.size(); ++i) ++refs_[size_t(d.pages[i])];
    if (partial) {
      const int32_t fresh = take();
      pending_.push_back(page_copy{d.pages.back(), fresh});
      d.pages.back() = fresh;
    }
    dst = add_sequence();
    seqs_[size_t(dst)] = std::move(d);
    return status::success();
  }

  // Releases seq's pages (a shared page returns to the free list with its last owner); the id may be reused.
  void free(int seq) {
    if (!check_seq(seq, "free").ok()) return;
    sequence& s = seqs_[size_t(seq)];
    for (int32_t p : s.pages)
      if (--refs_[size_t(p)] == 0) free_.push_back(p);
    s = sequence{};
    free_ids_.push_back(seq);
  }

  int64_t length(int seq) const { return valid(seq) ? seqs_[size_t(seq)].length : 0; }
  // Page indices of seq in token order (page i holds tokens i*page_tokens ..).
  const std::vector<int32_t>& pages(int seq) const {
    static const std::vector<int32_t> none;
    return valid(seq) ? seqs_[size_t(seq)].pages : none;
  }
  int64_t free_pages() const { return int64_t(free_.size()); }
  int64_t n_pages() const { return int64_t(refs_.size()); }
  int page_tokens() const { return page_tokens_; }
  bool valid(int seq) const { return seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live; }

  // Page copies queued by fork since the last call; run them with kv_pool::copy_pages.
  std::vector<page_copy> take_pending_copies() { return std::exchange(pending_, {}); }

 private:
  struct sequence {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  int64_t pages_for(int64_t tokens) const { return (tokens + page_tokens_ - 1) / page_tokens_; }
  int32_t take() {
    const int32_t p = free_.back();
    free_.pop_back();
    refs_[size_t(p)] = 1;
    return p;
  }
  status check_seq(int seq, const char* what) const {
    if (!valid(seq))
      return error(status_code::invalid_argument,
                   std::string("page_allocator::") + what + ": no sequence " + std::to_string(seq));
    return status::success();
  }

  int page_tokens_ = default_page_tokens;
  std::vector<int32_t> refs_;   // [n_pages] owners of each page
  std::vector<int32_t> free_;   // free pages, taken from the back
  std::vector<sequence> seqs_;  // by id
  std::vector<int> free_ids_;
  std::vector<page_copy> pending_;
};

// The page table of one batch in CSR form: sequence i of the batch owns
// page_indices[row_offsets[i] .. row_offsets[i+1]); seq_lens[i] tokens, of which last_page_len[i] in
// its last page. Built on the host, uploaded by the caller (row_offsets, page_indices, seq_lens are
// what the kernels read).
struct page_table_host {
  std::vector<int32_t> row_offsets;    // [n_seqs + 1]
  std::vector<int32_t> page_indices;   // [row_offsets.back()]
  std::vector<int32_t> last_page_len;  // [n_seqs], 1..page_tokens (0 for an empty sequence)
  std::vector<int32_t> seq_lens;       // [n_seqs]

  // The table of `seqs` (allocator ids, in batch order) at their current lengths.
  status build(const page_allocator& a, std::span<const int> seqs) {
    row_offsets.assign(1, 0);
    page_indices.clear();
    last_page_len.clear();
    seq_lens.clear();
    for (int s : seqs) {
      if (!a.valid(s))
        return error(status_code::invalid_argument, "page_table_host::build: no sequence " + std::to_string(s));
      const int64_t len = a.length(s);
      if (len > INT32_MAX) return error(status_code::invalid_argument, "page_table_host::build: sequence too long");
      const auto& p = a.pages(s);
      page_indices.insert(page_indices.end(), p.begin(), p.end());
      row_offsets.push_back(int32_t(page_indices.size()));
      seq_lens.push_back(int32_t(len));
      last_page_len.push_back(len == 0 ? 0 : int32_t((len - 1) % a.page_tokens() + 1));
    }
    return status::success();
  }
  int n_seqs() const { return int(seq_lens.size()); }
};

}  // namespace q35::kv
