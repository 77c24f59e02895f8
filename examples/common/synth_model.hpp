// synth_model: a full-size Qwen3.5 model built in device memory with random weights in the per-tensor
// formats of a llama-quantize Q4_K_M file (spec §3.3), for benchmarks without a multi-GB download.
// The bytes come from a device kernel; block scales are patched so activations stay finite.
//
//   gen::synth_model s;  Q35_TRY(s.build(io::hparams_of<models::qwen35_9b>(), false, seed));
//   gen::decoder d;      Q35_TRY(d.init(s.model(), cfg));
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_model.hpp"
#include "memory_plan.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/io/ggml_types.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/io/model_weights.hpp"
#include "q35/io/tensor_catalogue.hpp"

namespace q35::gen {

// Fills one tensor: random 16-bit units, with the f16 scale fields of each quantized block set to fixed
// values (q4_K: d and dmin, the first two units of 72; q6_K: d, the last unit of 105), or f32 values
// uniform in [center - spread, center + spread].
// Thread-to-data mapping: a grid-stride loop, one 16-bit unit (or one float) per thread per trip.
struct synth_fill_kernel {
  enum class mode : int { f32, q4_k, q6_k };
  struct params {
    void* data;       // device: the tensor's bytes (2-byte aligned; 4-byte for f32)
    int64_t n_units;  // 16-bit units (quantized modes) or floats (f32 mode)
    mode m;
    float center, spread;        // f32 mode
    uint16_t d_bits, dmin_bits;  // quantized modes: f16 bits of every block's d (and q4_K dmin)
    uint64_t seed;
    // 0: unit i lands at data[i]. Otherwise the tensor is laid out in chunks of chunk_units units (of
    // the mode: 16-bit or float),
    // chunk c at data + c * stride_units units (an expert store's home: each expert's gate matrix
    // followed by its up matrix); the values are those of the contiguous tensor.
    int64_t chunk_units = 0, stride_units = 0;
  };
  struct shared_storage {};
  static constexpr int threads = 256;
  static constexpr int64_t max_blocks = 4096;  // grid-stride beyond this
  static dim3 grid(const params& p) {
    const int64_t b = (p.n_units + threads - 1) / threads;
    return dim3(unsigned(b < max_blocks ? b : max_blocks));
  }

  // splitmix64 of (seed, i): independent 64 random bits per unit.
  Q35_HOST_DEVICE static uint64_t random_bits(uint64_t seed, int64_t i) {
    uint64_t z = seed + uint64_t(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // The 16-bit unit i of a quantized tensor.
  Q35_HOST_DEVICE static uint16_t quant_unit(const params& p, int64_t i) {
    const uint16_t r = uint16_t(random_bits(p.seed, i) >> 48);
    if (p.m == mode::q4_k) {
      const int64_t u = i % 72;  // 144-byte block: d, dmin, 12 scale bytes, 128 nibble bytes
      return u == 0 ? p.d_bits : u == 1 ? p.dmin_bits : r;
    }
    return i % 105 == 104 ? p.d_bits : r;  // 210-byte block: ql, qh, int8 scales, then d
  }
  // Float i of an f32 tensor: center + spread * u, u uniform in [-1, 1).
  Q35_HOST_DEVICE static float f32_value(const params& p, int64_t i) {
    const float u = float(random_bits(p.seed, i) >> 40) * (1.0f / float(1 << 23)) - 1.0f;
    return p.center + p.spread * u;
  }

  Q35_HOST_DEVICE static int64_t place(const params& p, int64_t i) {
    return p.chunk_units ? i / p.chunk_units * p.stride_units + i % p.chunk_units : i;
  }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t stride = int64_t(arch::grid_dim().x) * threads;
    for (int64_t i = int64_t(arch::block_idx().x) * threads + arch::thread_rank(); i < p.n_units; i += stride) {
      if (p.m == mode::f32) {
        static_cast<float*>(p.data)[place(p, i)] = f32_value(p, i);
      } else {
        static_cast<uint16_t*>(p.data)[place(p, i)] = quant_unit(p, i);
      }
    }
  }
};

// A tensor of the synthetic model: its Q4_K_M type and shape, and where it lies in the one allocation.
struct synth_tensor {
  std::string name;
  io::ggml_type type = io::ggml_type::f32;
  io::tensor_shape ne{1, 1, 1, 1};
  uint64_t offset = 0, n_bytes = 0;
};

// The type llama-quantize's Q4_K_M gives tensor `name` of `h` (spec §3.3): q4_K by default; output q6_K;
// token_embd q6_K when tied; attn_v, GDN attn_qkv and ffn_down(_exps/_shexp) q6_K on the "more bits"
// layers i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2; 1-D tensors, norms, ssm_conv1d, ffn_gate_inp* f32.
io::ggml_type q4_k_m_type(const io::model_hparams& h, const io::expected_tensor& t, bool tied);

// Every tensor of `h` (no output.weight when tied), 256-byte aligned one after another.
std::vector<synth_tensor> synth_layout(const io::model_hparams& h, bool tied);

// Launches the fill of `t` at `base` (device) with the value ranges the model math wants (see .cpp).
// chunk_bytes/stride_bytes: the tensor goes to `base` itself in chunks (synth_fill_kernel::params).
status fill_tensor(uint8_t* base, const synth_tensor& t, const io::model_hparams& h, uint64_t seed, stream_t s,
                   int64_t chunk_bytes = 0, int64_t stride_bytes = 0);

// A Qwen3.5 MoE shape from its hyper-parameters (checkpoints without traits in include/q35/models):
// the 35B-A3B's attention, GDN and norm constants with these replaced; every layer MoE, full
// attention every 4th layer, a shared expert as wide as a routed one.
struct moe_shape {
  uint32_t n_layers, n_embd, n_heads, ssm_n_v_heads, n_experts, n_experts_used, expert_ff_dim;
};
io::model_hparams moe_hparams(const moe_shape& s);
// 122B-A10B: 48 layers (llama.cpp's size detection), hidden 3072, 32 q / 2 kv heads of 256, GDN 16 k /
// 64 v heads of 128, 256 experts of 1024, top-8: our reading of the published model card (~122 B
// parameters, ~10 B active; test_synth_model.cpp counts them).
inline constexpr moe_shape qwen35_122b_a10b_shape{48, 3072, 32, 64, 256, 8, 1024};
// 397B-A17B: 60 layers, hidden 4096, 32 q / 2 kv heads of 256, 512 experts of 1024, top-10 (a published
// training config); GDN 16 k / 64 v heads of 128 assumed.
inline constexpr moe_shape qwen35_397b_a17b_shape{60, 4096, 32, 64, 512, 10, 1024};

// The synthetic models by key (qwen35_generate --bench-model, qwen35_server --bench-model): the
// checkpoints with traits (9B, 35B-A3B, 27B, 9B-MoE, the tiny ones) and the shapes above.
struct synth_entry {
  std::string key, name;
  io::model_hparams h;
  bool tied = false;  // token_embd doubles as the LM head
};
std::vector<synth_entry> synth_models();
// The entry whose key or name is `key`, or null.
const synth_entry* find_synth_model(const std::vector<synth_entry>& all, const std::string& key);
// "9B, 27B, ...": the keys, for messages.
std::string synth_model_keys();
// `e` cut to its first n layers (each as large as before; the schedule's first n entries), named
// "<name> (first n of L layers)"; an error when the model has fewer than n layers.
status first_layers(const synth_entry& e, uint32_t n, synth_entry& out);

// Whether synthetic tensor `name` holds routed experts (kept in host memory with expert slots).
bool is_synth_routed_expert(const std::string& name);
// Device bytes synth_model::build allocates for the weights of `layout`, all of them or (host_experts)
// all but the routed experts: what the memory planner places.
uint64_t synth_device_bytes(const std::vector<synth_tensor>& layout, bool host_experts);

// plan_memory for the synthetic model of `h`: the device bytes build() takes with and without the
// routed experts, the decoder configured as `cfg`, under `budget` (slots: --expert-cache).
status plan_synth_memory(const io::model_hparams& h, bool tied, const decoder_config& cfg, uint64_t budget,
                         std::optional<int64_t> slots, memory_plan& out);

class synth_model {
 public:
  // Allocates and fills every tensor of `h` on the device (`tied`: token_embd doubles as the LM head).
  // expert_slots in 0 .. n_experts - 1 (a model with MoE layers): the routed experts are written to an
  // expert store's pinned host memory instead, behind that many device slots per MoE layer, as
  // device_model::load does for a file; the weights are the same bytes either way.
  status build(const io::model_hparams& h, bool tied, uint64_t seed, stream_t s = nullptr, int expert_slots = -1);

  const device_model& model() const { return model_; }
  const std::vector<synth_tensor>& tensors() const { return layout_; }
  uint64_t bytes() const { return data_.bytes(); }             // device bytes of the weights (without a store's)
  const uint8_t* device_data() const { return data_.data(); }  // the tensors at their layout offsets
  bool tied() const { return tied_; }

 private:
  device_buffer<uint8_t> data_;
  std::vector<synth_tensor> layout_;
  std::vector<io::tensor_info> infos_;  // what model_weights points into
  device_model model_;
  bool tied_ = false;
};

}  // namespace q35::gen
