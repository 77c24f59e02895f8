// What a decoder takes and checks: the kernels' limits on a file (check_supported), the buffers of
// init() and the plan of memory_needed() from one computation, and the shapes the layers run on.
#include <algorithm>
#include <cstdint>

#include "decoder.hpp"
#include "decoder_record.hpp"
#include "q35/launch/matmul.hpp"

namespace q35::gen {

using detail::record_layout;

namespace {

status unsupported(const std::string& key, uint64_t value, const std::string& supported) {
  return error(status_code::unsupported, "key '" + key + "' = " + std::to_string(value) +
                                             " is not supported by the compiled kernels (supported: " + supported +
                                             ")");
}

// Byte offset of a slice of `bytes` in a workspace, 256-byte aligned.
size_t align_256(size_t b) { return (b + 255) / 256 * 256; }

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
  int64_t score_rows = 0;    // scoring's logits rows (decoder_config::score_rows, at most n_batch)
  int64_t max_pages = 1;     // pages of the pool, which is also what one sequence can hold
  int64_t page_entries = 0;  // page indices a step lists at most: n_seq_max * max_pages (shared pages repeat)
  std::optional<kv::kv_pool_shape> kv;     // the KV pool of the full-attention layers
  std::optional<kv::gdn_state_shape> gdn;  // the recurrent slots of the Gated DeltaNet layers
  size_t workspace = 0, a16 = 0, sample_ws = 0;
  int64_t record = 0;        // int32 entries of the batch record
  bool moe_grouped = false;  // some MoE layer call may take moe_ffn's grouped path (host experts: staging)
};

// Rows of a decode group at most (decoder.hpp: batch invariance).
int64_t decode_group_rows_of(const decoder_config& cfg) {
  const int64_t S = cfg.n_seq_max;
  if (!cfg.batch_invariant) return S;
  return std::min<int64_t>(S, cfg.batch_invariant_gemm ? launch::gemm_i8_invariant_tokens : launch::gemv_max_tokens);
}

// Attention split partials' rows (attn_batch::split_rows): the default budget, or with batch invariance
// enough for invariant_attn_splits splits in every row of the largest decode group.
int64_t attn_split_rows_of(const decoder_config& cfg) {
  const int64_t rows = cfg.batch_invariant ? decode_group_rows_of(cfg) * invariant_attn_splits : 0;
  return std::max<int64_t>(launch::attn_split_row_budget, rows);
}

buffer_sizes sizes_of(const io::model_hparams& h, const decoder_config& cfg) {
  buffer_sizes z;
  const int64_t nb = cfg.n_batch, S = cfg.n_seq_max;
  const int n_attn = int(h.count(models::layer_type::full_attention));
  const int n_gdn = int(h.count(models::layer_type::gated_deltanet));
  z.decode_rows = decode_group_rows_of(cfg);
  z.call_rows = std::max(nb, z.decode_rows);
  // prompt chunks go to the grouped path past 8 rows, decode groups past their MoE decode limit
  const bool every_count = cfg.batch_invariant && cfg.batch_invariant_gemm;
  z.moe_grouped = nb > launch::moe_decode_max_tokens || z.decode_rows > launch::moe_decode_limit(every_count);
  z.max_rows = nb + S;
  z.logit_rows = cfg.keep_all_logits ? z.max_rows : S;
  z.score_rows = std::min(cfg.score_rows, nb);
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
  size_t ws = launch::matmul_workspace_bytes(h.n_embd, rows, h.n_vocab);  // the LM head
  if (n_attn)
    ws = std::max(ws, launch::attn_layer_workspace_bytes(attn_shape_of(h), rows, cfg.n_ctx, attn_split_rows_of(cfg)));
  if (n_gdn) ws = std::max(ws, launch::gdn_layer_workspace_bytes(gdn_shape_of(h), rows));
  if (h.count(models::ffn_type::dense)) ws = std::max(ws, launch::dense_ffn_workspace_bytes(ffn_shape_of(h), rows));
  if (h.count(models::ffn_type::moe))
    ws = std::max(ws, launch::moe_workspace_bytes(ffn_shape_of(h), rows, every_count));
  z.workspace = align_256(ws);
  if (h.n_embd % quant::act16_group_elems == 0)
    z.a16 = quant::act16_bytes(h.n_embd, std::min<int64_t>(rows, launch::gemv_max_tokens));
  z.sample_ws = align_256(launch::sample_workspace_bytes(1, int(h.n_vocab)));
  z.page_entries = S * z.max_pages;
  z.record = record_layout{z.max_rows, z.page_entries, S}.size();
  return z;
}

// The batch record's page offsets are int32: every sequence holding a full context must fit them.
status check_record(const buffer_sizes& z, const decoder_config& cfg) {
  if (z.record <= INT32_MAX) return status::success();
  return error(status_code::invalid_argument,
               std::to_string(cfg.n_seq_max) + " sequences of up to " + std::to_string(z.max_pages) +
                   " pages (context " + std::to_string(cfg.n_ctx) + ") need " + std::to_string(z.page_entries) +
                   " page entries in a step's record, more than its 32-bit offsets address");
}

}  // namespace

int64_t decoder::decode_group_rows() const { return decode_group_rows_of(cfg_); }
int64_t decoder::attn_split_rows() const { return attn_split_rows_of(cfg_); }
bool decoder::moe_every_count(const group& g) const {
  return g.decode && cfg_.batch_invariant && cfg_.batch_invariant_gemm;
}
bool decoder::moe_grouped(const group& g) const { return g.n > launch::moe_decode_limit(moe_every_count(g)); }

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
  if (cfg.batch_invariant_gemm && !cfg.batch_invariant)
    return error(status_code::invalid_argument, "batch_invariant_gemm asks for batch_invariant, which is off");
  if (cfg.expert_staging_window < 1)
    return error(status_code::invalid_argument,
                 "expert staging window of " + std::to_string(cfg.expert_staging_window) + " experts < 1");
  if (cfg.score_rows < 0)
    return error(status_code::invalid_argument, "score rows " + std::to_string(cfg.score_rows) + " < 0");
  cfg_.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  const int64_t S = cfg.n_seq_max;
  if (staging_in_flight_) Q35_TRY(sync());  // a re-init frees the staging record
  Q35_TRY(stream_.create());
  graphs_.clear();
  graphs_.resize(size_t(S + 1));
  graph_failed_ = false;
  graph_failure_.clear();
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

  // Rows of one layer call at most: a prompt chunk, or a decode group.
  const buffer_sizes z = sizes_of(h, cfg_);
  max_rows_ = z.max_rows;
  cfg_.score_rows = z.score_rows;

  // state: KV pages for the full-attention layers (one pool for all sequences), recurrent slots for the
  // GDN layers (one per sequence, then one per prefix checkpoint)
  Q35_TRY(check_record(z, cfg_));
  page_entries_ = z.page_entries;
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
  score_logits_ = device_buffer<float>();
  score_ids_ = device_buffer<int32_t>();
  scores_ = device_buffer<launch::token_logprobs>();
  score_total_ = 0;
  if (z.score_rows > 0) {
    Q35_TRY(score_logits_.allocate(size_t(z.score_rows * h.n_vocab)));
    Q35_TRY(score_ids_.allocate(size_t(max_rows_)));
    Q35_TRY(score_ids_host_.allocate(size_t(max_rows_)));
    Q35_TRY(scores_.allocate(size_t(max_rows_)));
    Q35_TRY(scores_host_.allocate(size_t(max_rows_)));
  }
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
  if (experts_ && z.moe_grouped)  // (memory_needed() counts it the same way)
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
  if (cfg.n_ctx < 1 || cfg.n_batch < 1 || cfg.n_seq_max < 1 || cfg.n_prefix_slots < 0 ||
      cfg.expert_staging_window < 1 || cfg.score_rows < 0)
    return error(status_code::invalid_argument, "decoder::memory_needed: a size of the configuration is below 1");
  decoder_config c = cfg;
  c.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  const buffer_sizes z = sizes_of(h, c);
  Q35_TRY(check_record(z, c));
  out = {};
  out.kv = z.kv ? kv::kv_pool_bytes(*z.kv) : 0;
  out.recurrent = z.gdn ? z.gdn->bytes() : 0;
  out.workspace = z.workspace;
  out.activations = 2 * uint64_t(z.max_rows) * h.n_embd * sizeof(float) + z.a16 +
                    uint64_t(z.logit_rows + z.score_rows) * h.n_vocab * sizeof(float);
  const uint64_t S = uint64_t(cfg.n_seq_max);
  out.other = uint64_t(z.record) * sizeof(int32_t) + (S + 1) * sizeof(int32_t) + S * sizeof(uint64_t) + z.sample_ws;
  const uint64_t n_moe = h.count(models::ffn_type::moe);
  if (z.score_rows > 0) out.other += uint64_t(z.max_rows) * (sizeof(int32_t) + sizeof(launch::token_logprobs));
  if ((cfg.expert_stats || expert_staging) && n_moe) out.other += n_moe * h.n_experts * sizeof(uint64_t);
  if (expert_staging && z.moe_grouped) out.expert_staging = expert_staging;
  return status::success();
}

decoder_memory decoder::device_memory() const {
  decoder_memory d;
  d.kv = kv_.bytes();
  d.recurrent = rs_.bytes();
  d.workspace = workspace_.bytes();
  d.activations = h_.bytes() + a_.bytes() + a16_.bytes() + logits_.bytes() + score_logits_.bytes();
  d.other = batch_.bytes() + result_.bytes() + rng_counters_.bytes() + sample_ws_.bytes() + score_ids_.bytes() +
            scores_.bytes() + (expert_load_ ? expert_load_->bytes() : 0);
  d.expert_staging = expert_staging_.bytes();
  return d;
}

}  // namespace q35::gen
