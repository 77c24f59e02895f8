// The decoder's sequences between steps: clearing one, prefix checkpoints (save_prefix,
// start_from_prefix: KV pages forked, recurrent state copied) and whole saved states (save, load).
#include <algorithm>

#include "decoder.hpp"

namespace q35::gen {

status decoder::clear(int seq) {
  Q35_TRY(check_seq(seq, "clear"));
  sequence& q = seqs_[size_t(seq)];
  if (q.pages >= 0) pages_.free(q.pages);
  q = sequence{};
  q.pages = kv_.bytes() > 0 ? pages_.add_sequence() : -1;
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.reset(seq, stream()));
  Q35_TRY(fill_bytes(rng_counters_.data() + seq, 0, sizeof(uint64_t), stream()));
  Q35_TRY(fill_bytes(result_.data() + cfg_.n_seq_max, 0, sizeof(int32_t), stream()));  // the error flag
  return sync();
}

status decoder::clear() { return clear(0); }

bool decoder::prefix_valid(int id) const {
  return id >= 0 && size_t(id) < prefixes_.size() && prefixes_[size_t(id)].live;
}

int decoder::prefixes_free() const {
  return int(std::count_if(prefixes_.begin(), prefixes_.end(), [](const prefix& p) { return !p.live; }));
}

const std::vector<int32_t>& decoder::prefix_tokens(int id) const {
  static const std::vector<int32_t> none;
  return prefix_valid(id) ? prefixes_[size_t(id)].tokens : none;
}

int64_t decoder::prefix_pages() const {
  std::vector<bool> held(size_t(pages_.n_pages()), false);
  int64_t n = 0;
  for (const prefix& p : prefixes_)
    if (p.live && p.pages >= 0)
      for (int32_t pg : pages_.pages(p.pages))
        if (!held[size_t(pg)]) held[size_t(pg)] = true, ++n;
  return n;
}

status decoder::save_prefix(int seq, int& id) {
  Q35_TRY(check_seq(seq, "save_prefix"));
  const sequence& q = seqs_[size_t(seq)];
  const int pt = pages_.page_tokens();
  if (q.n_past < 1 || q.n_past % pt != 0)
    return error(status_code::invalid_argument,
                 "decoder::save_prefix: sequence " + std::to_string(seq) + " holds " + std::to_string(q.n_past) +
                     " tokens; a checkpoint needs a positive multiple of the page size " + std::to_string(pt));
  const auto it = std::find_if(prefixes_.begin(), prefixes_.end(), [](const prefix& p) { return !p.live; });
  if (it == prefixes_.end())
    return error(status_code::out_of_memory, "decoder::save_prefix: all " + std::to_string(prefixes_.size()) +
                                                 " prefix checkpoint slots are taken");
  const int slot = int(it - prefixes_.begin());
  prefix p;
  if (q.pages >= 0) {
    Q35_TRY(pages_.fork(q.pages, p.pages));  // full pages only (n_past is page-aligned): shared, no copy
  }
  if (recurrent_bytes_ > 0) {
    const status c = rs_.copy(seq, cfg_.n_seq_max + slot, stream());
    if (!c.ok()) {
      if (p.pages >= 0) pages_.free(p.pages);
      return c;
    }
  }
  p.live = true;
  p.tokens = q.history;
  *it = std::move(p);
  id = slot;
  return status::success();
}

status decoder::start_from_prefix(int seq, int id) {
  Q35_TRY(check_seq(seq, "start_from_prefix"));
  if (!prefix_valid(id))
    return error(status_code::invalid_argument,
                 "decoder::start_from_prefix: no prefix checkpoint " + std::to_string(id));
  const prefix& p = prefixes_[size_t(id)];
  Q35_TRY(clear(seq));
  sequence& q = seqs_[size_t(seq)];
  if (p.pages >= 0) {
    int forked = -1;
    Q35_TRY(pages_.fork(p.pages, forked));  // full pages: shared, no copy, no new page
    pages_.free(q.pages);
    q.pages = forked;
  }
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.copy(cfg_.n_seq_max + id, seq, stream()));
  q.history = p.tokens;
  q.n_past = int64_t(p.tokens.size());
  return status::success();
}

void decoder::drop_prefix(int id) {
  if (!prefix_valid(id)) return;
  prefix& p = prefixes_[size_t(id)];
  if (p.pages >= 0) pages_.free(p.pages);
  p = prefix{};  // its slot is written again only by a later save_prefix, after the copies queued before it
}

// K and V of the sequence's first n_tokens tokens, page by page for every layer, to or from `blob`.
status decoder::copy_sequence_kv(int seq, std::vector<uint8_t>& blob, bool to_host, int64_t n_tokens) const {
  const int pseq = seqs_[size_t(seq)].pages;
  if (pseq < 0) return status::success();
  const std::vector<int32_t>& pages = pages_.pages(pseq);
  const int64_t n_pages = (n_tokens + kv::default_page_tokens - 1) / kv::default_page_tokens;
  size_t off = 0;
  std::vector<uint8_t> sized;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0 sizes the blob, pass 1 copies
    off = 0;
    for (int il = 0; il < int(attn_index_.size()); ++il) {
      if (attn_index_[size_t(il)] < 0) continue;
      const kv::kv_layer_view v = const_cast<kv::kv_pool&>(kv_).layer(attn_index_[size_t(il)]);
      const size_t eb = kv::kv_type_bytes(v.type);
      const size_t kp = size_t(v.n_kv_heads) * size_t(v.page_tokens) * size_t(v.head_dim) * eb;
      const size_t vp = size_t(v.n_kv_heads) * size_t(v.page_tokens) * size_t(v.value_dim) * eb;
      for (int64_t i = 0; i < n_pages; ++i) {
        const size_t p = size_t(pages[size_t(i)]);
        uint8_t* k = static_cast<uint8_t*>(v.k) + p * kp;
        uint8_t* vv = static_cast<uint8_t*>(v.v) + p * vp;
        if (pass == 1) {
          if (to_host) {
            Q35_TRY(copy(blob.data() + off, k, kp, copy_kind::device_to_host, stream()));
            Q35_TRY(copy(blob.data() + off + kp, vv, vp, copy_kind::device_to_host, stream()));
          } else {
            Q35_TRY(copy(k, blob.data() + off, kp, copy_kind::host_to_device, stream()));
            Q35_TRY(copy(vv, blob.data() + off + kp, vp, copy_kind::host_to_device, stream()));
          }
        }
        off += kp + vp;
      }
    }
    if (pass == 0) {
      if (to_host) {
        blob.assign(off, 0);
      } else if (blob.size() != off) {
        return error(status_code::invalid_argument, "the saved KV holds " + std::to_string(blob.size()) +
                                                        " bytes, this decoder needs " + std::to_string(off));
      }
    }
  }
  return sync();
}

status decoder::save(int seq, decoder_state& out) const {
  Q35_TRY(check_seq(seq, "save"));
  const sequence& q = seqs_[size_t(seq)];
  out.tokens = q.history;
  out.last_logits.clear();
  if (q.logits_row >= 0) Q35_TRY(last_logits(seq, out.last_logits));
  out.recurrent.clear();
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.snapshot(seq, out.recurrent, stream()));
  return copy_sequence_kv(seq, out.kv, true, q.n_past);
}

status decoder::load(int seq, const decoder_state& in) {
  Q35_TRY(clear(seq));
  sequence& q = seqs_[size_t(seq)];
  const int64_t n = int64_t(in.tokens.size());
  if (n > cfg_.n_ctx)
    return error(status_code::invalid_argument, "the saved state holds " + std::to_string(n) +
                                                    " tokens, more than the context of " + std::to_string(cfg_.n_ctx));
  if (!in.last_logits.empty() && int64_t(in.last_logits.size()) != int64_t(m_->hparams().n_vocab))
    return error(status_code::invalid_argument, "the saved logits have " + std::to_string(in.last_logits.size()) +
                                                    " entries, the model's vocabulary " +
                                                    std::to_string(m_->hparams().n_vocab));
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.restore(seq, in.recurrent, stream()));
  if (q.pages >= 0) {
    Q35_TRY(pages_.reserve(q.pages, n));
    Q35_TRY(copy_sequence_kv(seq, const_cast<std::vector<uint8_t>&>(in.kv), false, n));
  }
  if (!in.last_logits.empty()) {
    // row `seq` of the logits: no other sequence keeps its last logits there any more
    for (sequence& o : seqs_)
      if (o.logits_row == seq) o.logits_row = -1;
    Q35_TRY(copy(logits_.data() + int64_t(seq) * int64_t(in.last_logits.size()), in.last_logits.data(),
                 in.last_logits.size() * 4, copy_kind::host_to_device, stream()));
    q.logits_row = seq;
  }
  q.history = in.tokens;
  q.n_past = n;
  return sync();
}

}  // namespace q35::gen
