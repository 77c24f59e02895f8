// decoder: Qwen3.5 sequences on the device — embedding, the file's layer schedule (Gated DeltaNet or
// gated attention; dense or MoE FFN), final norm, LM head and sampling — composed from the library's
// layer calls. Shapes come from the file at run time. One decoder holds up to n_seq_max sequences, each
// with its recurrent-state slot and its KV pages taken on demand from one pool of n_ctx tokens; a step
// advances any of them at once.
//
// One sequence (the CLI; sequence 0):
//   gen::decoder d;  Q35_TRY(d.init(model, cfg));
//   Q35_TRY(d.eval(prompt_ids));              // prefill (in chunks of cfg.n_batch tokens)
//   int32_t id;  Q35_TRY(d.sample(params, {}, id));   // only the id comes back to the host
//   Q35_TRY(d.eval({&id, 1}));                // one decode step
// Many (a server):
//   Q35_TRY(d.step({{0, {&id0, 1}}, {3, prompt_chunk}}));   // seq 0 decodes while seq 3 prefills
//   Q35_TRY(d.sample({{0, p0, recent0}, {3, p3, recent3}}, ids));
//
// Batch invariance (cfg.batch_invariant): a sequence's logits and tokens do not depend on which other
// sequences share its steps, as long as its own inputs are the same (its prompt chunked the same way).
// The rows of a step run in groups, and every layer call sees one group at a time: the one-token inputs
// (decode rows) in groups of at most launch::gemv_max_tokens (8), each longer input (a prompt chunk)
// alone. Within a decode group every row is computed as it would be alone: the GEMV sums each row in the
// same order at 1..8 tokens and its calls ask for row_invariant (Q6_K rows whose one-token products would
// take narrow integer items take the float path instead), attention cuts each sequence's keys into a
// fixed number of splits by its own length (attn_batch::seq_splits), the Gated DeltaNet recurrence, the MoE decode
// kernels and the router are per row. The cost: more than 8 decoding sequences read the weights once per group of 8,
// and the few Q6_K shapes lose their one-token integer path. Without it one decode group takes every one-token input
// (past 8 rows the tensor-core GEMM, whose rows round differently from the GEMV's) and one-token steps take the fastest
// path, so a row may differ in its last bits with the company it keeps.
// With cfg.batch_invariant_gemm as well, decode groups take up to launch::gemm_i8_invariant_tokens (64)
// rows and every matmul of the attention, Gated DeltaNet and dense FFN layers and the LM head runs on the
// tensor-core GEMM at every row count (launch::matmul_args::gemm_every_count), whose rows do not depend
// on the other rows of a call of 1..64: 64 sequences read the weights once, not 8 times, and a single
// sequence pays the GEMM's 16-token tile for its one row. MoE layers run such a group in one call of
// their decode kernels (launch::moe_ffn with gemm_every_count: up to 64 rows, each (row, expert) pair
// computed on its own, a shared expert of another format on the GEMM at every count). Attention keeps 32 splits per
// sequence in either invariant mode (invariant_attn_splits): the split partials grow with the group
// (64 rows x 32 splits x n_heads x value_dim floats, 32 MiB for the 9B), so that a lone long context
// keeps its split-KV parallelism among 64 rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device_model.hpp"
#include "q35/arch/graph.hpp"
#include "q35/arch/memory.hpp"
#include "q35/kv/kv_pool.hpp"
#include "q35/kv/page_table.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/launch/expert_load.hpp"
#include "q35/launch/logit_bias.hpp"
#include "q35/launch/logprobs.hpp"
#include "q35/launch/sample.hpp"
#include "q35/ops/router.hpp"

namespace q35::gen {

// Which experts the device slots of a host-resident model hold (decoder_config::expert_policy), chosen
// from the router's counts at each rebalance.
enum class expert_policy {
  frequency,  // the most selections, each count halved at every look (a decayed frequency)
  lru,        // the most recently selected (the look at which an expert was last selected; within one
              // look, the more selections first): a least-recently-used cache at look granularity
};
const char* to_string(expert_policy p);

// Attention splits per sequence of a batch-invariant decode group at least (more where the group is
// smaller than 8 rows): 32 x 4 KV heads of the 9B are ~128 blocks for one sequence on ~132 SMs.
inline constexpr int64_t invariant_attn_splits = 32;

struct decoder_config {
  int64_t n_ctx = 4096;  // tokens of KV pool shared by all sequences (a single sequence may use all of it)
  int n_seq_max = 1;     // sequences held at once (recurrent-state slots)
  kv::kv_type kv_type = kv::kv_type::f16;
  int64_t n_batch = 512;              // tokens of one input at most (eval() feeds a longer one in chunks)
  bool keep_all_logits = false;       // eval()/step() return the logits of every input token, not only the last
  bool use_graphs = true;             // CUDA: record decode-only steps once per sequence count and replay them
  bool batch_invariant = false;       // rows independent of the batch (see above)
  bool batch_invariant_gemm = false;  // with batch_invariant: decode groups of up to 64 rows on the GEMM
  // Scoring (seq_input::score): logits rows the LM head computes at once for a scored input, each slice
  // then reduced to its log-probabilities on the device (score_rows x n_vocab floats of activations, and
  // n_batch + n_seq_max answers of 172 B); 0: scoring off. At most n_batch.
  int64_t score_rows = 0;
  // Prefix checkpoints kept at once (see save_prefix): each holds one recurrent-state slot
  // (recurrent_bytes()) of device memory, and shares the KV pages of its tokens with the pool.
  int n_prefix_slots = 0;
  // Count, per MoE layer, how many tokens the router sends to each expert (expert_counts()): one
  // histogram of n_experts 64-bit counters per MoE layer that the router adds to with atomics.
  bool expert_stats = false;
  // MoE layers: adaptive top-k (launch::router's route.adaptive). A token whose routing entropy is
  // low reads fewer experts than the file's expert_used_count; departs from the trained routing.
  // Each k value must lie in 1..expert_used_count and the thresholds must ascend.
  std::optional<ops::adaptive_k_options> moe_adaptive_k;
  // Models loaded with host-resident experts (device_model::experts()): every this many steps the
  // most used experts of each MoE layer (router counts, halved at each rebalance) are promoted into
  // its device slots (0: the slots keep the experts they were loaded with).
  int expert_rebalance_steps = 16;
  expert_policy expert_cache_policy = expert_policy::frequency;  // host-resident experts: what the slots hold
  // Host-resident experts: a prompt chunk's layer call (more than 8 rows) copies the experts it
  // selects into a staging area this many experts at a time (launch::moe_staging_bytes), a window's
  // copy then its GEMM; at least 1, and n_experts or more stages a whole layer in one pass.
  int expert_staging_window = 64;
};

// The device memory a decoder allocates in init(), by kind (decoder::memory_needed before, and
// decoder::device_memory after; the sampler's ring of recent ids, a few KB, with a logit bias a biased
// copy of each biased row, 4 B per vocabulary entry, and with logprobs 172 B per sequence are taken on
// first use).
struct decoder_memory {
  uint64_t kv = 0;              // the KV pool of the full-attention layers
  uint64_t recurrent = 0;       // Gated DeltaNet state: one slot per sequence and per prefix checkpoint
  uint64_t workspace = 0;       // the largest layer call's workspace
  uint64_t activations = 0;     // hidden rows, normed rows (and their 16-bit form), logits
  uint64_t other = 0;           // batch record, sampled ids, random streams, sampling workspace, router counts
  uint64_t expert_staging = 0;  // a window of experts for the grouped path (host-resident experts)
  uint64_t total() const { return kv + recurrent + workspace + activations + other + expert_staging; }
};

// The expert cache of one MoE layer over a session (models with host-resident experts).
struct expert_cache_stats {
  uint64_t hits = 0;        // selections of decode-path calls served from a device slot
  uint64_t misses = 0;      // ... read from host memory by the kernels (zero-copy)
  uint64_t staged = 0;      // selections of steps whose layer call staged the layer (grouped path)
  uint64_t host_bytes = 0;  // misses x expert bytes + (per staging call) its selected unslotted experts'
  uint64_t promotions = 0;  // experts copied into slots
};

// What a prompt cache holds: the tokens fed so far and the device state after them.
struct decoder_state {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> recurrent;  // recurrent_state_pool::snapshot of the slot
  std::vector<uint8_t> kv;         // K and V of every full-attention layer for the tokens
  std::vector<float> last_logits;  // the logits after the last token, so generation can start from them
};

// One sequence's new tokens in a step.
struct seq_input {
  int seq = 0;
  std::span<const int32_t> tokens;
  // Scoring (a prompt's log-probabilities; needs decoder_config::score_rows): -1 off; 0 ..
  // launch::logprobs_max_top: each row reports the log-probability of the token after it (tokens[t + 1],
  // and `next` after the last token) under its logits as computed, with this many of the most likely
  // ids. A scored input runs as its own group of the step (never in a recorded decode graph).
  int score = -1;
  int32_t next = -1;  // the token after the input, when known (-1: its last row reports none)
};

// One sequence's draw after a step.
struct seq_sample {
  int seq = 0;
  launch::sampling_params params;
  std::span<const int32_t> recent;  // latest ids of the sequence, oldest first (repetition penalty)
  // Added to the logits before the penalties and filters (launch::add_logit_bias): ids in
  // [0, n_vocab), at most launch::logit_bias_max_entries; an id listed twice gets both biases in order.
  std::span<const launch::logit_bias_entry> bias;
  // -1: none; 0 .. launch::logprobs_max_top: the drawn id's log-probability and this many of the most
  // likely ids with theirs, from the step's logits as computed (before bias and penalties).
  int top_logprobs = -1;
};

// Checks that the compiled kernels serve every shape of `h`; the message names the GGUF key, the file's
// value and the supported values.
status check_supported(const io::model_hparams& h);

class decoder {
 public:
  decoder() = default;
  decoder(const decoder&) = delete;
  decoder& operator=(const decoder&) = delete;
  ~decoder();

  status init(const device_model& m, const decoder_config& cfg);

  // The device memory init() will take for a file of hyper-parameters `h` under `cfg`;
  // expert_staging: the model's expert_store::staging_bytes(cfg.expert_staging_window) when its
  // experts are host-resident, else 0.
  static status memory_needed(const io::model_hparams& h, const decoder_config& cfg, uint64_t expert_staging,
                              decoder_memory& out);
  // What init() took (equal to memory_needed's answer for the same file and configuration).
  decoder_memory device_memory() const;

  // One step: every input's tokens after its sequence's n_past(seq) tokens (distinct sequences, each
  // input 1..n_batch tokens, pages permitting). On success the last logits of each input's sequence are
  // ready for sample()/last_logits() until the next step; with keep_all_logits `host_logits` (if given)
  // receives every row of every input, inputs in the order given, appended. `scores` (required when an
  // input asks for scoring) receives tokens.size() answers for each scored input, in the order given,
  // appended: answer t holds the token after tokens[t] (id -1 where that is unknown: the last row of an
  // input without `next`).
  status step(std::span<const seq_input> inputs, std::vector<float>* host_logits = nullptr,
              std::vector<launch::token_logprobs>* scores = nullptr);
  // Draws the next token of each listed sequence on the device (each with its own parameters and its
  // own random stream, which clear(seq) restarts); `ids` receives them in order. One host synchronization.
  // With `logprobs`, it receives one entry per request (id -1 for those that asked for none); computing
  // them adds one launch per asking request and one download.
  status sample(std::span<const seq_sample> requests, std::vector<int32_t>& ids,
                std::vector<launch::token_logprobs>* logprobs = nullptr);

  int n_seq_max() const { return cfg_.n_seq_max; }
  int64_t score_rows() const { return cfg_.score_rows; }                       // 0: scoring off
  int32_t n_vocab() const { return m_ ? int32_t(m_->hparams().n_vocab) : 0; }  // logits per row
  int64_t n_past(int seq) const;
  const std::vector<int32_t>& tokens(int seq) const;
  // Forgets sequence `seq` (state to zero, pages freed, random stream restarted).
  status clear(int seq);
  // The last logits row of `seq`, copied to the host.
  status last_logits(int seq, std::vector<float>& out) const;
  // Prompt cache: the state of `seq` after the tokens fed so far, and its restoration.
  status save(int seq, decoder_state& out) const;
  status load(int seq, const decoder_state& in);

  // Prefix checkpoints: the state of a sequence at a page-aligned position, kept apart from every
  // sequence, so that new sequences whose tokens begin the same way start there instead of at 0.
  // A checkpoint shares the sequence's KV pages (reference counted; full pages are never written again)
  // and copies its recurrent state into one of cfg.n_prefix_slots slots (device to device, on the
  // stream). Until drop_prefix() its pages stay taken, so a pool under pressure drops checkpoints first.
  //
  // save_prefix: n_past(seq) must be a positive multiple of page_tokens(), and a slot free; `id`
  // receives the checkpoint. start_from_prefix: `seq` becomes a sequence holding the checkpoint's
  // tokens (its previous tokens forgotten, as by clear(seq)); it has no logits until its next step.
  status save_prefix(int seq, int& id);
  status start_from_prefix(int seq, int id);
  void drop_prefix(int id);
  int n_prefix_slots() const { return cfg_.n_prefix_slots; }
  int prefixes_free() const;
  bool prefix_valid(int id) const;
  const std::vector<int32_t>& prefix_tokens(int id) const;  // empty for an invalid id
  int64_t prefix_pages() const;  // KV pages the checkpoints hold (a page shared by several counted once)

  // KV pages of the pool: all, free.
  int64_t pages_total() const { return pages_.n_pages(); }
  int64_t pages_free() const { return pages_.n_pages() > 0 ? pages_.free_pages() : 0; }
  int page_tokens() const { return pages_.page_tokens(); }

  // Sequence 0: the single-sequence interface of the CLI.
  status eval(std::span<const int32_t> tokens, std::vector<float>* host_logits = nullptr);
  // eval() that also scores the tokens (seq_input::score = top_n): `scores` receives tokens.size() answers,
  // answer t for the token after tokens[t] (the last: `next`, or id -1 when next is -1). Chunks of n_batch
  // tokens, each chunk's last row scored by the following chunk's first token.
  status eval_scored(std::span<const int32_t> tokens, int top_n, int32_t next,
                     std::vector<launch::token_logprobs>& scores);
  status sample(const launch::sampling_params& p, std::span<const int32_t> recent, int32_t& id);
  status last_logits(std::vector<float>& out) const { return last_logits(0, out); }
  int64_t n_past() const { return n_past(0); }
  const std::vector<int32_t>& tokens() const { return tokens(0); }
  status clear();
  status save(decoder_state& out) const { return save(0, out); }
  status load(const decoder_state& in) { return load(0, in); }
  int64_t n_ctx() const { return cfg_.n_ctx; }

  // The file's MoE layers (layer indices, ascending), and with cfg.expert_stats the tokens routed to each
  // expert since init(): out[j][e] for layer moe_layers()[j], summed over every step of every sequence
  // (a token counts once for each of the k experts it is routed to). Waits for stream().
  const std::vector<int>& moe_layers() const { return moe_layers_; }
  status expert_counts(std::vector<std::vector<uint64_t>>& out) const;
  // Per MoE layer, the expert cache's record (empty when every expert is on the device). Waits for stream().
  status expert_cache(std::vector<expert_cache_stats>& out);
  // Device slots per MoE layer for host-resident experts (the mean when layers differ); -1: every expert
  // on the device. expert_layer_slots(): each MoE layer's (empty: every expert on the device).
  int expert_slots() const { return experts_ ? experts_->slots() : -1; }
  std::vector<int> expert_layer_slots() const {
    std::vector<int> v;
    for (size_t j = 0; experts_ && j < experts_->layers().size(); ++j) v.push_back(experts_->slots(j));
    return v;
  }
  int expert_rebalance_steps() const { return cfg_.expert_rebalance_steps; }
  expert_policy expert_cache_policy() const { return cfg_.expert_cache_policy; }

  uint64_t kv_bytes() const { return kv_bytes_; }
  uint64_t recurrent_bytes() const { return recurrent_bytes_; }  // of one sequence
  uint64_t workspace_bytes() const { return workspace_.bytes(); }
  // Whether decode-only steps replay recorded graphs (CUDA), and how many steps did.
  bool graphs_active() const;
  int64_t graph_replays() const { return graph_replays_; }
  // Why decode steps stopped being recorded as graphs: the failed capture's message (empty while none
  // failed). The steps run eagerly after it, with the same results.
  const std::string& graph_failure() const { return graph_failure_; }
  stream_t stream() const { return stream_.get(); }

  // Benchmark hook (--bench): while set, steps run eagerly (no graph) and `mark(c)` is called on the host
  // right after the calls of category c are enqueued on stream(), so timestamps recorded there split a
  // step by call.
  enum class call { batch_upload, embedding, norm, attention, gdn, dense_ffn, moe_ffn, lm_head };
  void set_call_hook(std::function<void(call)> mark) { hook_ = std::move(mark); }

 private:
  struct sequence {
    int pages = -1;  // the page allocator's sequence
    int64_t n_past = 0;
    std::vector<int32_t> history;
    int64_t logits_row = -1;  // its row of logits_ after the last step it took part in
  };
  struct prefix {
    bool live = false;
    int pages = -1;  // the page allocator's sequence holding its pages
    std::vector<int32_t> tokens;
  };
  // A run of rows that every layer call sees alone: the decode group (one-token inputs) or one prompt chunk.
  struct group {
    int64_t row0 = 0, n = 0;  // rows of the step
    int n_seqs = 0;           // inputs (sequences) of the group
    int max_seq_tokens = 0;   // longest input
    int64_t max_seq_len = 0;  // longest sequence after the step (graphs: n_ctx)
    int64_t header = 0;       // offset of its header in the batch record
    int64_t logit_row0 = 0;   // its first logits row; rows: n (keep_all_logits) or n_seqs
    int64_t logit_rows = 0;
    int64_t first_logit_token = 0;  // rows [row0 + first_logit_token, row0 + n) go to the LM head
    bool decode = false;
    int score = -1;          // a scored input's top_n (seq_input::score), else -1
    int64_t score_rows = 0;  // its rows that report an answer: n, or n - 1 without `next`
    int64_t score_out0 = 0;  // its first answer in scores_ (and its ids in score_ids_)
  };

  status check_seq(int seq, const char* what) const;
  // Builds the groups and the batch record of a step on the host, uploads it; reserves pages.
  status plan_step(std::span<const seq_input> inputs);
  // synchronize(stream()), after which no copy from the staging record is pending.
  status sync() const;
  // Every launch of one forward pass over the planned groups: what a graph records.
  status forward(int64_t n_rows);
  // The scored groups' log-probabilities: per slice of score_rows rows, the LM head then launch::logprobs.
  status score_groups();
  // Rows of a decode group at most (see above).
  int64_t decode_group_rows() const;
  // Attention splits per sequence of a decode group of n rows (attn_batch::seq_splits): as many as the
  // split partials hold for the largest decode group when batch_invariant (every group the same, so a
  // row's splits do not depend on its company), else for this group's rows; at most what -c can use.
  int decode_splits(int64_t n) const;
  // Rows (tokens x splits) of the attention split partials (attn_batch::split_rows).
  int64_t attn_split_rows() const;
  // Whether group g's MoE calls ask for gemm_every_count (a decode group with batch_invariant_gemm), and
  // whether they take moe_ffn's grouped path (which stages host-resident experts).
  bool moe_every_count(const group& g) const;
  bool moe_grouped(const group& g) const;
  status copy_sequence_kv(int seq, std::vector<uint8_t>& blob, bool to_host, int64_t n_tokens) const;
  launch::attn_shape attn_shape() const;
  launch::gdn_shape gdn_shape() const;
  launch::ffn_shape ffn_shape() const;

  const device_model* m_ = nullptr;
  decoder_config cfg_;
  std::vector<sequence> seqs_;
  std::vector<prefix> prefixes_;             // [n_prefix_slots]; checkpoint i keeps its state in slot n_seq_max + i
  std::vector<int> attn_index_, gdn_index_;  // per layer: its index among its kind
  std::vector<int> moe_layers_, moe_index_;  // the MoE layers; per layer: its index among them (-1: dense)
  // Host-resident experts: fold the selections since the last call into the cache's record (staged:
  // the step staged its MoE layers), then (rebalance) promote the most used experts into the slots.
  status settle_experts(bool staged, bool rebalance);
  // The promotions whose copies have completed are named by the index from the next step on (no wait).
  status land_promotions();
  bool step_stages() const;  // a layer call of the planned step takes the grouped path

  std::unique_ptr<launch::expert_load> expert_load_;   // [moe_layers_.size()][n_experts] with cfg.expert_stats
  expert_store* experts_ = nullptr;                    // the model's host-resident experts, or null
  device_buffer<uint8_t> expert_staging_;              // one MoE layer's experts for the grouped path
  std::vector<std::vector<uint64_t>> expert_seen_;     // the counts at the last settle
  std::vector<std::vector<double>> expert_score_;      // what rebalance promotes (the policy's key)
  std::vector<std::vector<uint64_t>> expert_pending_;  // selections since the last rebalance
  int64_t expert_looks_ = 0;                           // rebalances since init
  std::vector<expert_cache_stats> cache_stats_;
  int steps_since_rebalance_ = 0;
  kv::kv_pool kv_;
  kv::page_allocator pages_;
  kv::recurrent_state_pool rs_;
  owned_stream stream_;
  std::vector<std::unique_ptr<launch_graph>> graphs_;  // [n decode rows]: the decode-only step of that size
  bool graph_failed_ = false;
  std::string graph_failure_;
  int64_t graph_replays_ = 0;
  uint64_t kv_bytes_ = 0, recurrent_bytes_ = 0;
  int64_t max_rows_ = 0;      // rows of a step at most: n_batch + n_seq_max
  int64_t page_entries_ = 0;  // page indices of a step at most (decoder_record.hpp)
  device_buffer<uint8_t> workspace_;
  device_buffer<float> h_, a_, logits_;
  device_buffer<uint8_t> a16_;  // a_ quantized by the norm for the GEMV's integer path (groups of <= 8 rows)
  // The batch record of a step (decoder_record.hpp) and its pinned staging copy; a step uploads the
  // entries it uses.
  std::vector<group> groups_;
  device_buffer<int32_t> batch_;
  pinned_buffer<int32_t> staging_;
  mutable bool staging_in_flight_ = false;  // a copy from staging_ may be pending (until the next sync())
  device_buffer<int32_t> recent_;
  pinned_buffer<int32_t> recent_host_;
  device_buffer<launch::logit_bias_entry> bias_;  // the biased requests' lists, one after another
  pinned_buffer<launch::logit_bias_entry> bias_host_;
  device_buffer<float> biased_logits_;            // [biased requests][n_vocab]
  device_buffer<float> score_logits_;             // [score_rows][n_vocab]
  device_buffer<int32_t> score_ids_;              // [max_rows]: the id each scored row reports
  pinned_buffer<int32_t> score_ids_host_;         // (written after a sync(), as staging_)
  device_buffer<launch::token_logprobs> scores_;  // [max_rows]
  pinned_buffer<launch::token_logprobs> scores_host_;
  int64_t score_total_ = 0;                         // answers of the planned step
  device_buffer<launch::token_logprobs> logprobs_;  // [n_seq_max], taken on first use
  pinned_buffer<launch::token_logprobs> logprobs_host_;
  device_buffer<int32_t> result_;  // [n_seq_max + 1]: sampled ids, then the kernels' error flag
  pinned_buffer<int32_t> result_host_;
  device_buffer<uint64_t> rng_counters_;  // [n_seq_max]: each sequence's random stream
  device_buffer<uint8_t> sample_ws_;
  std::function<void(call)> hook_;
};

}  // namespace q35::gen
