// The decoder's composition: per chunk of input tokens, the batch description goes to the device, then
// embedding -> layers (norm, mixer, norm, FFN) -> final norm -> LM head, all asynchronous.
#include "decoder.hpp"

#include <algorithm>

#include "q35/launch/matmul.hpp"
#include "q35/launch/norm.hpp"

namespace q35::gen {

namespace {

status unsupported(const std::string& key, uint64_t value, const std::string& supported) {
  return error(status_code::unsupported, "key '" + key + "' = " + std::to_string(value) +
                                             " is not supported by the compiled kernels (supported: " + supported +
                                             ")");
}

// Byte offset of a slice of `bytes` in a workspace, 256-byte aligned.
size_t align_256(size_t b) { return (b + 255) / 256 * 256; }

// The batch record of a step (int32 entries), at fixed offsets so that a recorded graph's addresses
// hold from step to step (R = rows of a step at most, P = pages of the pool, S = n_seq_max):
//   [0, R)                    position of each row
//   [R, 2R)                   token id of each row
//   [2R, 2R + P)              page indices of the step's sequences, one run per sequence
//   [2R + P + g H, + H)       group g's header (H = 4 S + 4): seq_offsets [S + 1] (rows within the
//                             group), slots [S], page_row_offsets [S + 1] (into the page indices above,
//                             not rebased: every group's page_indices is the same pointer), seq_lens [S]
// A group's positions pointer is positions + row0; its x and h are offset by row0 rows the same way.
struct record_layout {
  int64_t R, P, S;
  int64_t positions() const { return 0; }
  int64_t ids() const { return R; }
  int64_t pages() const { return 2 * R; }
  int64_t header(int64_t g) const { return 2 * R + P + g * (4 * S + 4); }
  static int64_t seq_offsets(int64_t h) { return h; }
  int64_t slots(int64_t h) const { return h + S + 1; }
  int64_t page_rows(int64_t h) const { return h + 2 * S + 1; }
  int64_t seq_lens(int64_t h) const { return h + 3 * S + 2; }
  int64_t size() const { return header(S); }  // S groups at most (each holds one input or more)
};

launch::attn_shape attn_shape_of(const io::model_hparams& h) {
  return {int(h.n_embd),    int(h.n_heads),  int(h.n_kv_heads),   int(h.head_dim),
          int(h.value_dim), int(h.rope_dim), float(h.rope_theta), float(h.rms_eps)};
}
launch::gdn_shape gdn_shape_of(const io::model_hparams& h) {
  return {int(h.n_embd),           int(h.ssm_n_k_heads),   int(h.ssm_n_v_heads), int(h.ssm_k_head_dim),
          int(h.ssm_v_head_dim()), int(h.ssm_conv_kernel), float(h.rms_eps)};
}
launch::ffn_shape ffn_shape_of(const io::model_hparams& h) {
  return {int(h.n_embd),         int(h.ff_dim),        int(h.n_experts),
          int(h.n_experts_used), int(h.expert_ff_dim), int(h.shared_ff_dim)};
}

// What init() allocates for file `h` and configuration `cfg` (n_batch already at most n_ctx): one
// computation for init() and for memory_needed(), so that the plan is what is taken.
struct buffer_sizes {
  int64_t decode_rows = 0;  // one-token rows of a decode group at most
  int64_t call_rows = 0;    // rows of one layer call at most: a prompt chunk, or a decode group
  int64_t max_rows = 0;     // rows of a step at most: n_batch + n_seq_max
  int64_t logit_rows = 0;
  int64_t max_pages = 1;
  std::optional<kv::kv_pool_shape> kv;     // the KV pool of the full-attention layers
  std::optional<kv::gdn_state_shape> gdn;  // the recurrent slots of the Gated DeltaNet layers
  size_t workspace = 0, a16 = 0, sample_ws = 0;
  int64_t record = 0;  // int32 entries of the batch record
};

buffer_sizes sizes_of(const io::model_hparams& h, const decoder_config& cfg) {
  buffer_sizes z;
  const int64_t nb = cfg.n_batch, S = cfg.n_seq_max;
  const int n_attn = int(h.count(models::layer_type::full_attention));
  const int n_gdn = int(h.count(models::layer_type::gated_deltanet));
  z.decode_rows = cfg.batch_invariant ? std::min<int64_t>(S, launch::gemv_max_tokens) : S;
  z.call_rows = std::max(nb, z.decode_rows);
  z.max_rows = nb + S;
  z.logit_rows = cfg.keep_all_logits ? z.max_rows : S;
  if (n_attn > 0) {
    kv::kv_pool_shape ks;
    ks.n_layers = n_attn;
    ks.n_kv_heads = int(h.n_kv_heads);
    ks.head_dim = int(h.head_dim);
    ks.value_dim = int(h.value_dim);
    ks.page_tokens = kv::default_page_tokens;
    ks.n_pages = (cfg.n_ctx + ks.page_tokens - 1) / ks.page_tokens;
    ks.type = cfg.kv_type;
    z.kv = ks;
    z.max_pages = ks.n_pages;
  }
  if (n_gdn > 0)
    z.gdn = kv::gdn_state_shape{n_gdn,
                                int(S) + cfg.n_prefix_slots,  // the sequences' slots, then the checkpoints'
                                int(h.ssm_n_k_heads),
                                int(h.ssm_n_v_heads),
                                int(h.ssm_k_head_dim),
                                int(h.ssm_v_head_dim()),
                                int(h.ssm_conv_kernel)};
  // one workspace for the largest layer call
  const int64_t rows = z.call_rows;
  size_t ws = launch::matmul_workspace_bytes(h.n_embd, rows);
  if (n_attn) ws = std::max(ws, launch::attn_layer_workspace_bytes(attn_shape_of(h), rows, cfg.n_ctx));
  if (n_gdn) ws = std::max(ws, launch::gdn_layer_workspace_bytes(gdn_shape_of(h), rows));
  if (h.count(models::ffn_type::dense)) ws = std::max(ws, launch::dense_ffn_workspace_bytes(ffn_shape_of(h), rows));
  if (h.count(models::ffn_type::moe)) ws = std::max(ws, launch::moe_workspace_bytes(ffn_shape_of(h), rows));
  z.workspace = align_256(ws);
  if (h.n_embd % quant::act16_group_elems == 0)
    z.a16 = quant::act16_bytes(h.n_embd, std::min<int64_t>(rows, launch::gemv_max_tokens));
  z.sample_ws = align_256(launch::sample_workspace_bytes(1, int(h.n_vocab)));
  z.record = record_layout{z.max_rows, z.max_pages, S}.size();
  return z;
}

}  // namespace

const char* to_string(expert_policy p) { return p == expert_policy::lru ? "lru" : "frequency"; }

status check_supported(const io::model_hparams& h) {
  const std::string p = h.arch + ".";
  if (h.count(models::layer_type::full_attention) > 0) {
    if (h.head_dim != 128 && h.head_dim != 256) return unsupported(p + "attention.key_length", h.head_dim, "128, 256");
    if (h.value_dim != h.head_dim)
      return unsupported(p + "attention.value_length", h.value_dim,
                         "equal to key_length " + std::to_string(h.head_dim));
    if (h.n_heads % h.n_kv_heads != 0)
      return unsupported(p + "attention.head_count", h.n_heads,
                         "a multiple of head_count_kv = " + std::to_string(h.n_kv_heads));
    if (h.rope_dim % 2 != 0 || h.rope_dim > h.head_dim)
      return unsupported(p + "rope.dimension_count", h.rope_dim, "even, <= key_length");
  }
  if (h.count(models::layer_type::gated_deltanet) > 0) {
    if (h.ssm_k_head_dim != 64 && h.ssm_k_head_dim != 128)
      return unsupported(p + "ssm.state_size", h.ssm_k_head_dim, "64, 128");
    if (h.ssm_v_head_dim() != h.ssm_k_head_dim)
      return unsupported(p + "ssm.inner_size / ssm.time_step_rank", h.ssm_v_head_dim(),
                         "equal to ssm.state_size = " + std::to_string(h.ssm_k_head_dim));
    if (h.ssm_n_v_heads % h.ssm_n_k_heads != 0)
      return unsupported(p + "ssm.time_step_rank", h.ssm_n_v_heads,
                         "a multiple of ssm.group_count = " + std::to_string(h.ssm_n_k_heads));
  }
  if (h.count(models::ffn_type::moe) > 0) {
    if (h.n_experts > 512) return unsupported(p + "expert_count", h.n_experts, "1..512");
    if (h.n_experts_used > 16) return unsupported(p + "expert_used_count", h.n_experts_used, "1..16");
  }
  return status::success();
}

decoder::~decoder() {
  if (staging_in_flight_) (void)sync();  // the staging record must outlive a pending copy from it
}

status decoder::init(const device_model& m, const decoder_config& cfg) {
  m_ = &m;
  cfg_ = cfg;
  const io::model_hparams& h = m.hparams();
  Q35_TRY(check_supported(h));
  if (cfg.n_ctx < 1) return error(status_code::invalid_argument, "context size " + std::to_string(cfg.n_ctx) + " < 1");
  if (cfg.n_batch < 1)
    return error(status_code::invalid_argument, "batch size " + std::to_string(cfg.n_batch) + " < 1");
  if (cfg.n_seq_max < 1 || cfg.n_seq_max > 4096)
    return error(status_code::invalid_argument,
                 "sequence count " + std::to_string(cfg.n_seq_max) + " is outside 1..4096");
  if (cfg.n_prefix_slots < 0 || cfg.n_prefix_slots > 4096)
    return error(status_code::invalid_argument,
                 "prefix checkpoint count " + std::to_string(cfg.n_prefix_slots) + " is outside 0..4096");
  if (cfg.expert_staging_window < 1)
    return error(status_code::invalid_argument,
                 "expert staging window of " + std::to_string(cfg.expert_staging_window) + " experts < 1");
  cfg_.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  const int64_t S = cfg.n_seq_max;
  if (staging_in_flight_) Q35_TRY(sync());  // a re-init frees the staging record
  Q35_TRY(stream_.create());
  graphs_.clear();
  graphs_.resize(size_t(S + 1));
  graph_failed_ = false;
  graph_replays_ = 0;

  // per-layer index among layers of its kind
  int n_attn = 0, n_gdn = 0;
  attn_index_.clear();
  gdn_index_.clear();
  for (const layer_views& l : m.layers()) {
    const bool attn = l.kind == models::layer_type::full_attention;
    attn_index_.push_back(attn ? n_attn++ : -1);
    gdn_index_.push_back(attn ? -1 : n_gdn++);
  }
  moe_layers_.clear();
  moe_index_.clear();
  for (size_t il = 0; il < m.layers().size(); ++il) {
    const bool moe = m.layers()[il].ffn_kind == models::ffn_type::moe;
    moe_index_.push_back(moe ? int(moe_layers_.size()) : -1);
    if (moe) moe_layers_.push_back(int(il));
  }

  // Rows of one layer call at most: a prompt chunk, or a decode group. A decode group's attention splits
  // cover a fixed number of keys (so a row's splits do not depend on its group): as few as the split
  // limits allow for the whole context, at least attn_min_split_keys.
  const buffer_sizes z = sizes_of(h, cfg_);
  const int64_t call_rows = z.call_rows;
  max_rows_ = z.max_rows;
  const int64_t max_splits =
      std::min<int64_t>(launch::attn_max_splits, std::max<int64_t>(1, launch::attn_split_row_budget / z.decode_rows));
  split_keys_ = std::max<int64_t>(launch::attn_min_split_keys, (cfg.n_ctx + max_splits - 1) / max_splits);
  split_keys_ = (split_keys_ + 3) / 4 * 4;

  // state: KV pages for the full-attention layers (one pool for all sequences), recurrent slots for the
  // GDN layers (one per sequence, then one per prefix checkpoint)
  max_pages_ = z.max_pages;
  kv_bytes_ = recurrent_bytes_ = 0;
  kv_ = kv::kv_pool();
  rs_ = kv::recurrent_state_pool();
  if (z.kv) {
    Q35_TRY(kv_.allocate(*z.kv));
    pages_.reset(z.kv->n_pages, z.kv->page_tokens);
    kv_bytes_ = kv_.bytes();
  } else {
    pages_.reset(0, kv::default_page_tokens);
  }
  if (z.gdn) {
    Q35_TRY(rs_.allocate(*z.gdn));
    recurrent_bytes_ = rs_.slot_bytes();
  }
  Q35_TRY(workspace_.allocate(z.workspace));

  // activations and the batch record, allocated once (a recorded graph keeps their addresses)
  Q35_TRY(h_.allocate(size_t(max_rows_ * h.n_embd)));
  Q35_TRY(a_.allocate(size_t(max_rows_ * h.n_embd)));
  a16_ = device_buffer<uint8_t>();
  if (z.a16) Q35_TRY(a16_.allocate(z.a16));
  Q35_TRY(logits_.allocate(size_t(z.logit_rows * h.n_vocab)));
  Q35_TRY(batch_.allocate(size_t(z.record)));
  Q35_TRY(staging_.allocate(batch_.size()));
  Q35_TRY(result_.allocate(size_t(S + 1)));
  Q35_TRY(result_host_.allocate(size_t(S + 1)));
  Q35_TRY(rng_counters_.allocate(size_t(S)));
  Q35_TRY(sample_ws_.allocate(z.sample_ws));
  Q35_TRY(fill_bytes(result_.data(), 0, result_.bytes(), stream()));  // ids and the error flag
  if (cfg.moe_adaptive_k) {
    if (moe_layers_.empty())
      return error(status_code::invalid_argument, "decoder: adaptive top-k is set but the model has no MoE layers");
    ops::route_options r;
    r.adaptive = true, r.adaptive_k = *cfg.moe_adaptive_k;
    if (const status st = launch::detail::validate_route(r, int(h.n_experts_used)); !st.ok())
      return error(status_code::invalid_argument, "decoder: " + st.message());
  }
  expert_load_.reset();
  experts_ = m.experts();
  expert_staging_ = device_buffer<uint8_t>();
  expert_seen_.assign(moe_layers_.size(), std::vector<uint64_t>(size_t(h.n_experts), 0));
  expert_score_.assign(moe_layers_.size(), std::vector<double>(size_t(h.n_experts), 0.0));
  expert_pending_.assign(moe_layers_.size(), std::vector<uint64_t>(size_t(h.n_experts), 0));
  expert_looks_ = 0;
  cache_stats_.assign(experts_ ? moe_layers_.size() : 0, {});
  steps_since_rebalance_ = 0;
  if (experts_ && call_rows > launch::moe_decode_max_tokens)  // (memory_needed() counts it the same way)
    Q35_TRY(expert_staging_.allocate(size_t(experts_->staging_bytes(cfg.expert_staging_window))));
  if ((cfg.expert_stats || experts_) && !moe_layers_.empty()) {  // the cache's policy reads the counts
    expert_load_ = std::make_unique<launch::expert_load>();
    Q35_TRY(expert_load_->allocate(int(moe_layers_.size()), int(h.n_experts)));  // zeroed on the default stream
    Q35_TRY(synchronize(nullptr));  // before the first router launch on stream()
  }
  seqs_.assign(size_t(S), sequence{});
  prefixes_.assign(size_t(cfg.n_prefix_slots), prefix{});
  for (int i = 0; i < S; ++i) Q35_TRY(clear(i));
  return status::success();
}

launch::attn_shape decoder::attn_shape() const { return attn_shape_of(m_->hparams()); }
launch::gdn_shape decoder::gdn_shape() const { return gdn_shape_of(m_->hparams()); }
launch::ffn_shape decoder::ffn_shape() const { return ffn_shape_of(m_->hparams()); }

status decoder::memory_needed(const io::model_hparams& h, const decoder_config& cfg, uint64_t expert_staging,
                              decoder_memory& out) {
  Q35_TRY(check_supported(h));
  if (cfg.n_ctx < 1 || cfg.n_batch < 1 || cfg.n_seq_max < 1 || cfg.n_prefix_slots < 0 || cfg.expert_staging_window < 1)
    return error(status_code::invalid_argument, "decoder::memory_needed: a size of the configuration is below 1");
  decoder_config c = cfg;
  c.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  const buffer_sizes z = sizes_of(h, c);
  out = {};
  out.kv = z.kv ? kv::kv_pool_bytes(*z.kv) : 0;
  out.recurrent = z.gdn ? z.gdn->bytes() : 0;
  out.workspace = z.workspace;
  out.activations =
      2 * uint64_t(z.max_rows) * h.n_embd * sizeof(float) + z.a16 + uint64_t(z.logit_rows) * h.n_vocab * sizeof(float);
  const uint64_t S = uint64_t(cfg.n_seq_max);
  out.other = uint64_t(z.record) * sizeof(int32_t) + (S + 1) * sizeof(int32_t) + S * sizeof(uint64_t) + z.sample_ws;
  const uint64_t n_moe = h.count(models::ffn_type::moe);
  if ((cfg.expert_stats || expert_staging) && n_moe) out.other += n_moe * h.n_experts * sizeof(uint64_t);
  if (expert_staging && z.call_rows > launch::moe_decode_max_tokens) out.expert_staging = expert_staging;
  return status::success();
}

decoder_memory decoder::device_memory() const {
  decoder_memory d;
  d.kv = kv_.bytes();
  d.recurrent = rs_.bytes();
  d.workspace = workspace_.bytes();
  d.activations = h_.bytes() + a_.bytes() + a16_.bytes() + logits_.bytes();
  d.other = batch_.bytes() + result_.bytes() + rng_counters_.bytes() + sample_ws_.bytes() +
            (expert_load_ ? expert_load_->bytes() : 0);
  d.expert_staging = expert_staging_.bytes();
  return d;
}

status decoder::check_seq(int seq, const char* what) const {
  if (!m_) return error(status_code::invalid_argument, std::string("decoder::") + what + ": not initialised");
  if (seq < 0 || seq >= cfg_.n_seq_max)
    return error(status_code::invalid_argument, std::string("decoder::") + what + ": sequence " + std::to_string(seq) +
                                                    " is outside 0.." + std::to_string(cfg_.n_seq_max - 1));
  return status::success();
}

int64_t decoder::n_past(int seq) const {
  return seq >= 0 && size_t(seq) < seqs_.size() ? seqs_[size_t(seq)].n_past : 0;
}

const std::vector<int32_t>& decoder::tokens(int seq) const {
  static const std::vector<int32_t> none;
  return seq >= 0 && size_t(seq) < seqs_.size() ? seqs_[size_t(seq)].history : none;
}

bool decoder::graphs_active() const {
  for (const auto& g : graphs_)
    if (g && g->ready()) return true;
  return false;
}

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

status decoder::sync() const {
  Q35_TRY(synchronize(stream()));
  staging_in_flight_ = false;
  return status::success();
}

status decoder::plan_step(std::span<const seq_input> inputs) {
  const int32_t n_vocab = int32_t(m_->hparams().n_vocab);
  const int64_t S = cfg_.n_seq_max;
  if (inputs.empty()) return error(status_code::invalid_argument, "decoder::step: no inputs");
  if (int64_t(inputs.size()) > S)
    return error(status_code::invalid_argument, "decoder::step: " + std::to_string(inputs.size()) +
                                                    " inputs, more than the " + std::to_string(S) + " sequences");
  // every check before any state changes, so that a refused step leaves the decoder as it was
  std::vector<char> seen(size_t(S), 0);
  int64_t rows = 0, new_pages = 0;
  for (const seq_input& in : inputs) {
    Q35_TRY(check_seq(in.seq, "step"));
    if (seen[size_t(in.seq)]++)
      return error(status_code::invalid_argument,
                   "decoder::step: sequence " + std::to_string(in.seq) + " appears twice");
    const sequence& q = seqs_[size_t(in.seq)];
    const int64_t n = int64_t(in.tokens.size());
    if (n < 1 || n > cfg_.n_batch)
      return error(status_code::invalid_argument, "decoder::step: sequence " + std::to_string(in.seq) + " has " +
                                                      std::to_string(n) + " new tokens (1.." +
                                                      std::to_string(cfg_.n_batch) + " per step)");
    if (q.n_past + n > cfg_.n_ctx)
      return error(status_code::invalid_argument, "the context is full: " + std::to_string(q.n_past) + " + " +
                                                      std::to_string(n) + " tokens exceed the context of " +
                                                      std::to_string(cfg_.n_ctx));
    for (int64_t i = 0; i < n; ++i)
      if (in.tokens[size_t(i)] < 0 || in.tokens[size_t(i)] >= n_vocab)
        return error(status_code::invalid_argument, "token id " + std::to_string(in.tokens[size_t(i)]) +
                                                        " at position " + std::to_string(q.n_past + i) +
                                                        " is outside the vocabulary of " + std::to_string(n_vocab));
    rows += n;
    if (q.pages >= 0) {
      const int64_t pt = pages_.page_tokens();
      new_pages += (q.n_past + n + pt - 1) / pt - int64_t(pages_.pages(q.pages).size());
    }
  }
  if (rows > max_rows_)
    return error(status_code::invalid_argument, "decoder::step: " + std::to_string(rows) +
                                                    " tokens, more than a step holds (" + std::to_string(max_rows_) +
                                                    " = batch size + sequences)");
  if (new_pages > pages_free())
    return error(status_code::out_of_memory, "kv pool: out of pages: the step needs " + std::to_string(new_pages) +
                                                 " more, " + std::to_string(pages_free()) + " free");

  // A copy from pinned memory reads the record when the stream reaches it, not when it is issued: the
  // record is rewritten only after a sync(). Decode steps find it free (sample() synchronizes); only
  // consecutive prefill steps wait here for the previous one.
  if (staging_in_flight_) Q35_TRY(sync());

  // groups: the one-token inputs in the order given (split into groups of <= 8 when batch_invariant),
  // then each longer input alone
  std::vector<const seq_input*> order;
  for (const seq_input& in : inputs)
    if (in.tokens.size() == 1) order.push_back(&in);
  const int64_t n_decode = int64_t(order.size());
  for (const seq_input& in : inputs)
    if (in.tokens.size() > 1) order.push_back(&in);
  const bool graph_step = n_decode == int64_t(inputs.size()) && cfg_.use_graphs && !hook_;
  const int64_t decode_cap = cfg_.batch_invariant ? launch::gemv_max_tokens : S;
  const record_layout rl{max_rows_, max_pages_, S};
  int32_t* r = staging_.data();
  groups_.clear();
  int64_t row = 0, page = 0, logit_row = 0;
  for (size_t i = 0; i < order.size();) {
    group g;
    g.decode = i < size_t(n_decode);
    const size_t end = g.decode ? std::min(size_t(n_decode), i + size_t(decode_cap)) : i + 1;
    g.row0 = row;
    g.header = rl.header(int64_t(groups_.size()));
    r[rl.seq_offsets(g.header)] = 0;
    r[rl.page_rows(g.header)] = int32_t(page);
    for (size_t j = i; j < end; ++j) {
      const seq_input& in = *order[j];
      sequence& q = seqs_[size_t(in.seq)];
      const int64_t n = int64_t(in.tokens.size());
      if (q.pages >= 0) Q35_TRY(pages_.reserve(q.pages, q.n_past + n));  // cannot fail: counted above
      const std::vector<int32_t>& pg = pages_.pages(q.pages);            // none without attention layers
      std::copy(pg.begin(), pg.end(), r + rl.pages() + page);
      page += int64_t(pg.size());
      const int64_t k = int64_t(j - i);
      for (int64_t t = 0; t < n; ++t) {
        r[rl.positions() + row + t] = int32_t(q.n_past + t);
        r[rl.ids() + row + t] = in.tokens[size_t(t)];
      }
      row += n;
      g.n += n;
      r[rl.seq_offsets(g.header) + k + 1] = int32_t(g.n);
      r[rl.slots(g.header) + k] = in.seq;
      r[rl.page_rows(g.header) + k + 1] = int32_t(page);
      r[rl.seq_lens(g.header) + k] = int32_t(q.n_past + n);
      g.max_seq_tokens = std::max(g.max_seq_tokens, int(n));
      g.max_seq_len = std::max(g.max_seq_len, q.n_past + n);
      // its last logits row
      q.logits_row = logit_row + (cfg_.keep_all_logits ? g.n - 1 : k);
    }
    g.n_seqs = int(end - i);
    if (g.decode && graph_step) g.max_seq_len = cfg_.n_ctx;  // a graph serves every length
    g.first_logit_token = cfg_.keep_all_logits || g.decode ? 0 : g.n - 1;
    g.logit_row0 = logit_row;
    g.logit_rows = g.n - g.first_logit_token;
    logit_row += g.logit_rows;
    groups_.push_back(g);
    i = end;
  }
  for (sequence& q : seqs_)
    if (!seen[size_t(&q - seqs_.data())]) q.logits_row = -1;  // rows of this step overwrite the old ones
  staging_in_flight_ = true;
  return copy(batch_.data(), r, size_t(rl.size()) * sizeof(int32_t), copy_kind::host_to_device, stream());
}

status decoder::forward(int64_t n_rows) {
  const io::model_hparams& h = m_->hparams();
  const int64_t e = h.n_embd;
  const int64_t S = cfg_.n_seq_max;
  const record_layout rl{max_rows_, max_pages_, S};
  stream_t s = stream();
  auto mark = [&](call c) {
    if (hook_) hook_(c);
  };
  const int32_t* b = batch_.data();
  int32_t* error_flag = result_.data() + S;

  launch::embedding_args em;
  em.table = m_->token_embd(), em.ids = b + rl.ids(), em.out = h_.data(), em.n_tokens = n_rows;
  em.maybe_error_flag = error_flag;
  Q35_TRY(launch::embedding(em, s));
  mark(call::embedding);

  // The norm also writes its output quantized for the projections that read it (a group of <= 8
  // rows, the GEMV's integer path), so they launch no quantization of their own; a16 is its view.
  quant::act16_view a16;
  auto norm = [&](const float* w, const float* x, float* y, int64_t r) {
    launch::rmsnorm_args a;
    a.x = x, a.maybe_w = w, a.y = y, a.rows = r, a.n = int(e), a.eps = float(h.rms_eps);
    if (a16_.data() && r <= launch::gemv_max_tokens) a.maybe_act16 = a16_.data(), a.act16_bytes = a16_.bytes();
    a16 = launch::act16_view_of(a);
    return launch::rmsnorm(a, s);
  };
  const auto& layers = m_->layers();
  for (size_t il = 0; il < layers.size(); ++il) {
    const layer_views& l = layers[il];
    // Every group alone through the layer: a row's result depends only on its group (see decoder.hpp).
    for (const group& g : groups_) {
      const int64_t n = g.n;
      float* hg = h_.data() + g.row0 * e;
      float* ag = a_.data() + g.row0 * e;
      // a = rms(h) * attn_norm;  h += mixer(a)
      Q35_TRY(norm(l.attn_norm, hg, ag, n));
      mark(call::norm);
      if (l.kind == models::layer_type::full_attention) {
        launch::attn_layer_args a;
        a.shape = attn_shape();
        a.w = l.attn;
        a.batch.seq_offsets = b + rl.seq_offsets(g.header);
        a.batch.positions = b + rl.positions() + g.row0;
        a.batch.page_row_offsets = b + rl.page_rows(g.header);
        a.batch.page_indices = b + rl.pages();
        a.batch.seq_lens = b + rl.seq_lens(g.header);
        a.batch.n_seqs = g.n_seqs;
        a.batch.n_tokens = n;
        a.batch.max_seq_tokens = g.max_seq_tokens;
        a.batch.max_seq_len = g.max_seq_len;
        if (g.decode) a.batch.split_keys = int(split_keys_);
        a.kv = kv_.layer(attn_index_[il]);
        a.x = ag, a.h = hg, a.maybe_x16 = a16, a.row_invariant = cfg_.batch_invariant;
        a.workspace = workspace_.data(), a.workspace_bytes = workspace_.bytes();
        Q35_TRY(launch::attention_layer(a, s));
        mark(call::attention);
      } else {
        launch::gdn_layer_args a;
        a.shape = gdn_shape();
        a.w = l.gdn;
        a.batch = {b + rl.seq_offsets(g.header), b + rl.slots(g.header), g.n_seqs, n, g.max_seq_tokens};
        a.state = rs_.layer(gdn_index_[il]);
        a.x = ag, a.h = hg, a.maybe_x16 = a16, a.row_invariant = cfg_.batch_invariant;
        a.workspace = workspace_.data(), a.workspace_bytes = workspace_.bytes();
        Q35_TRY(launch::gdn_layer(a, s));
        mark(call::gdn);
      }
      // f = rms(h) * post_attention_norm;  h += FFN(f)
      Q35_TRY(norm(l.post_attention_norm, hg, ag, n));
      mark(call::norm);
      launch::ffn_layer_args f;
      f.shape = ffn_shape();
      f.x = ag, f.h = hg, f.n_tokens = n, f.maybe_x16 = a16, f.row_invariant = cfg_.batch_invariant;
      f.workspace = workspace_.data(), f.workspace_bytes = workspace_.bytes();
      f.error_flag = error_flag;
      if (expert_load_ && moe_index_[il] >= 0) f.maybe_expert_counts = expert_load_->counts(moe_index_[il]);
      if (cfg_.moe_adaptive_k) f.route.adaptive = true, f.route.adaptive_k = *cfg_.moe_adaptive_k;
      if (l.ffn_kind == models::ffn_type::dense) {
        Q35_TRY(launch::dense_ffn(f, l.ffn, s));
        mark(call::dense_ffn);
      } else if (const expert_store::layer* el = experts_ ? experts_->find(int(il)) : nullptr;
                 el && n > launch::moe_decode_max_tokens) {
        // the grouped path reads packed experts: the ones the call selects, copied into the staging area
        launch::moe_weights w = l.moe;
        w.maybe_index.maybe_staging = expert_staging_.data(), w.maybe_index.staging_bytes = expert_staging_.bytes();
        Q35_TRY(launch::moe_ffn(f, w, s));
        mark(call::moe_ffn);
      } else {
        Q35_TRY(launch::moe_ffn(f, l.moe, s));  // host-resident experts: through the store's index
        mark(call::moe_ffn);
      }
    }
  }

  // per group: y = rms(h) * output_norm on its logits rows; logits = output . y
  for (const group& g : groups_) {
    Q35_TRY(norm(m_->output_norm(), h_.data() + (g.row0 + g.first_logit_token) * e, a_.data(), g.logit_rows));
    mark(call::norm);
    launch::matmul_args lm;
    lm.w = m_->output(), lm.x = a_.data(), lm.y = logits_.data() + g.logit_row0 * h.n_vocab;
    lm.n_tokens = g.logit_rows, lm.maybe_x16 = a16, lm.row_invariant = cfg_.batch_invariant;
    lm.maybe_workspace = workspace_.data(), lm.workspace_bytes = workspace_.bytes();
    Q35_TRY(launch::matmul(lm, s));
    mark(call::lm_head);
  }
  return status::success();
}

status decoder::step(std::span<const seq_input> inputs, std::vector<float>* host_logits) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  Q35_TRY(plan_step(inputs));
  const bool stages = experts_ && step_stages();
  if (stages) Q35_TRY(settle_experts(false, false));  // what came before was decode-path selections
  Q35_TRY(land_promotions());
  if (hook_) hook_(call::batch_upload);
  int64_t rows = 0;
  for (const group& g : groups_) rows += g.n;
  const int64_t k = int64_t(inputs.size());
  if (rows == k && cfg_.use_graphs && !graph_failed_ && !hook_) {
    // Decode-only step of k sequences: every launch depends only on device data and on bounds that do not
    // change from step to step (the attention splits are sized for the whole context), so it is recorded
    // once per k and replayed.
    launch_graph* gr = graphs_[size_t(k)].get();
    if (!gr) {
      graphs_[size_t(k)] = std::make_unique<launch_graph>();
      gr = graphs_[size_t(k)].get();
      const status c = gr->capture(stream(), [&] { return forward(rows); });
      if (!c.ok()) graph_failed_ = true;  // the sim has no graphs; on CUDA a failed capture runs eagerly
    }
    if (gr->ready()) {
      Q35_TRY(gr->replay(stream()));
      ++graph_replays_;
    } else {
      Q35_TRY(forward(rows));
    }
  } else {
    Q35_TRY(forward(rows));
  }
  for (const seq_input& in : inputs) {
    sequence& q = seqs_[size_t(in.seq)];
    q.n_past += int64_t(in.tokens.size());
    q.history.insert(q.history.end(), in.tokens.begin(), in.tokens.end());
  }
  if (experts_) {
    const bool rebalance = cfg_.expert_rebalance_steps > 0 && ++steps_since_rebalance_ >= cfg_.expert_rebalance_steps;
    if (rebalance) steps_since_rebalance_ = 0;
    if (stages || rebalance) Q35_TRY(settle_experts(stages, rebalance));
  }
  if (host_logits) {
    const int64_t nv = m_->hparams().n_vocab;
    for (const seq_input& in : inputs) {
      const sequence& q = seqs_[size_t(in.seq)];
      const int64_t n = cfg_.keep_all_logits ? int64_t(in.tokens.size()) : 1;
      const size_t off = host_logits->size();
      host_logits->resize(off + size_t(n * nv));
      Q35_TRY(copy(host_logits->data() + off, logits_.data() + (q.logits_row - n + 1) * nv, size_t(n * nv) * 4,
                   copy_kind::device_to_host, stream()));
    }
    Q35_TRY(sync());
  }
  return status::success();
}

status decoder::eval(std::span<const int32_t> tokens, std::vector<float>* host_logits) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  const sequence& q = seqs_[0];
  if (q.n_past + int64_t(tokens.size()) > cfg_.n_ctx)  // the whole input, before any chunk runs
    return error(status_code::invalid_argument, "the context is full: " + std::to_string(q.n_past) + " + " +
                                                    std::to_string(tokens.size()) + " tokens exceed the context of " +
                                                    std::to_string(cfg_.n_ctx));
  const int32_t n_vocab = int32_t(m_->hparams().n_vocab);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return error(status_code::invalid_argument, "token id " + std::to_string(tokens[i]) + " at position " +
                                                      std::to_string(q.n_past + int64_t(i)) +
                                                      " is outside the vocabulary of " + std::to_string(n_vocab));
  for (size_t i = 0; i < tokens.size(); i += size_t(cfg_.n_batch)) {
    const seq_input in{0, tokens.subspan(i, std::min(tokens.size() - i, size_t(cfg_.n_batch)))};
    Q35_TRY(step({&in, 1}, host_logits));
  }
  return status::success();
}

status decoder::last_logits(int seq, std::vector<float>& out) const {
  Q35_TRY(check_seq(seq, "last_logits"));
  const int64_t row = seqs_[size_t(seq)].logits_row;
  if (row < 0) return error(status_code::invalid_argument, "decoder: no logits yet");
  const int64_t nv = m_->hparams().n_vocab;
  out.resize(size_t(nv));
  Q35_TRY(copy(out.data(), logits_.data() + row * nv, size_t(nv) * 4, copy_kind::device_to_host, stream()));
  return sync();
}

status decoder::sample(std::span<const seq_sample> requests, std::vector<int32_t>& ids) {
  const int64_t S = cfg_.n_seq_max;
  if (int64_t(requests.size()) > S)
    return error(status_code::invalid_argument, "decoder::sample: more requests than sequences");
  const int32_t nv = int32_t(m_ ? m_->hparams().n_vocab : 0);
  // the repetition windows: the last `window` ids of each, newest first; -1 where the history is shorter
  size_t ring_total = 0;
  for (const seq_sample& r : requests) {
    Q35_TRY(check_seq(r.seq, "sample"));
    if (seqs_[size_t(r.seq)].logits_row < 0)
      return error(status_code::invalid_argument,
                   "decoder: sample() of sequence " + std::to_string(r.seq) + " before any eval()");
    if (r.params.repeat_last_n > 0 && r.params.repeat_penalty != 1.0f) ring_total += size_t(r.params.repeat_last_n);
  }
  stream_t s = stream();
  if (ring_total > 0) {
    if (recent_.size() < ring_total) Q35_TRY(recent_.allocate(ring_total));
    if (recent_host_.size() < ring_total) Q35_TRY(recent_host_.allocate(ring_total));
    size_t off = 0;
    for (const seq_sample& r : requests) {
      if (r.params.repeat_last_n <= 0 || r.params.repeat_penalty == 1.0f) continue;
      for (int i = 0; i < r.params.repeat_last_n; ++i)
        recent_host_[off + size_t(i)] = size_t(i) < r.recent.size() ? r.recent[r.recent.size() - 1 - size_t(i)] : -1;
      off += size_t(r.params.repeat_last_n);
    }
    Q35_TRY(copy(recent_.data(), recent_host_.data(), ring_total * sizeof(int32_t), copy_kind::host_to_device, s));
  }
  size_t off = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const seq_sample& r = requests[i];
    launch::sample_args a;
    a.logits = logits_.data() + seqs_[size_t(r.seq)].logits_row * int64_t(nv);
    a.n_rows = 1, a.n_vocab = nv, a.params = r.params;
    const bool ring = r.params.repeat_last_n > 0 && r.params.repeat_penalty != 1.0f;
    a.maybe_recent = ring ? recent_.data() + off : nullptr;
    if (ring) off += size_t(r.params.repeat_last_n);
    if (!a.maybe_recent) a.params.repeat_last_n = 0;
    a.rng_counter = rng_counters_.data() + r.seq;
    a.out_ids = result_.data() + i;
    a.workspace = sample_ws_.data(), a.workspace_bytes = sample_ws_.bytes();
    Q35_TRY(launch::sample(a, s));
  }
  // the one host synchronization of a decode step: the ids and the kernels' error flag in one copy
  Q35_TRY(result_.download(result_host_.data(), size_t(S + 1), s));
  Q35_TRY(sync());
  // The ring upload above read recent_host_ asynchronously: the sync() has completed it too.
  if (result_host_[size_t(S)])
    return error(status_code::kernel_fault, "a kernel reported an out-of-range token or expert id");
  ids.assign(result_host_.data(), result_host_.data() + requests.size());
  return status::success();
}

status decoder::sample(const launch::sampling_params& p, std::span<const int32_t> recent, int32_t& id) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  const seq_sample r{0, p, recent};
  std::vector<int32_t> ids;
  Q35_TRY(sample({&r, 1}, ids));
  id = ids[0];
  return status::success();
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
