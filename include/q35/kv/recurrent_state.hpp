// kv::recurrent_state_pool: one device allocation holding the Gated DeltaNet state (conv window and
// fp32 delta-rule state) of every GDN layer for every sequence slot; kv::gdn_state_view is what a
// kernel sees of one layer.
//
// Layout (floats), slot-major so that a slot's state over all layers is one contiguous range:
//   pool  = [n_slots][n_layers][layer_slot_floats]
//   layer_slot = conv [conv_kernel - 1][n_v][2 d_k + d_v]   then   ssm [n_v][d_v][d_k]
// conv: the last conv_kernel - 1 raw (pre-conv) projected inputs, oldest row first; each v-head j
//   keeps its own copy of the q and k channels of its k-head (j mod n_k) next to its v channels,
//   [q (d_k) | k (d_k) | v (d_v)], so one block per v-head owns all the state it reads and writes.
// ssm: the state S_j (key x value) of v-head j stored value-major: S_j[key i][value c] at c d_k + i.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"
#include "q35/core/status.hpp"

namespace q35::kv {

struct gdn_state_shape {
  int n_layers = 0;     // Gated DeltaNet layers (not all layers of the model)
  int n_slots = 0;      // sequences whose state is kept at once
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  int k_head_dim = 0;   // ssm.state_size
  int v_head_dim = 0;   // ssm.inner_size / n_v_heads
  int conv_kernel = 0;  // ssm.conv_kernel (4)

  // Channels of one v-head's conv window: [q | k | v].
  Q35_HOST_DEVICE int64_t conv_head_channels() const { return 2 * int64_t(k_head_dim) + v_head_dim; }
  Q35_HOST_DEVICE int64_t conv_floats() const { return int64_t(conv_kernel - 1) * n_v_heads * conv_head_channels(); }
  Q35_HOST_DEVICE int64_t ssm_floats() const { return int64_t(n_v_heads) * v_head_dim * k_head_dim; }
  // conv then ssm, padded to a multiple of 4 floats so that every ssm state is 16-byte aligned
  Q35_HOST_DEVICE int64_t layer_slot_floats() const { return (conv_floats() + 3) / 4 * 4 + ssm_floats(); }
  // Bytes of the pool: every slot of every layer.
  size_t bytes() const { return size_t(n_slots) * size_t(n_layers) * size_t(layer_slot_floats()) * sizeof(float); }
};

// One layer's state for all slots, as the kernels see it (device memory).
struct gdn_state_view {
  float* data = nullptr;    // this layer's state of slot 0; slot s at data + s * slot_stride
  int64_t slot_stride = 0;  // floats from one slot to the next (n_layers * layer_slot_floats)
  gdn_state_shape shape{};  // n_layers and n_slots as allocated

  Q35_HOST_DEVICE float* conv(int slot) const { return data + slot * slot_stride; }
  // [conv_kernel - 1][n_v][2 d_k + d_v]: row r, v-head j, channel c
  Q35_HOST_DEVICE int64_t conv_index(int r, int j, int c) const {
    return (int64_t(r) * shape.n_v_heads + j) * shape.conv_head_channels() + c;
  }
  Q35_HOST_DEVICE float* ssm(int slot) const { return data + slot * slot_stride + (shape.conv_floats() + 3) / 4 * 4; }
  // [d_v][d_k] state of v-head j
  Q35_HOST_DEVICE float* ssm_head(int slot, int j) const {
    return ssm(slot) + int64_t(j) * shape.v_head_dim * shape.k_head_dim;
  }
  bool empty() const { return data == nullptr; }
};

class recurrent_state_pool {
 public:
  // Allocates and zeroes the state of shape.n_layers layers x shape.n_slots slots.
  status allocate(const gdn_state_shape& s) {
    const auto bad = [](const std::string& m) {
      return error(status_code::invalid_argument, "recurrent_state_pool::allocate: " + m);
    };
    if (s.n_layers < 1) return bad("n_layers = " + std::to_string(s.n_layers) + " must be >= 1");
    if (s.n_slots < 1) return bad("n_slots = " + std::to_string(s.n_slots) + " must be >= 1");
    if (s.n_k_heads < 1 || s.n_v_heads < 1)
      return bad("n_k_heads = " + std::to_string(s.n_k_heads) + ", n_v_heads = " + std::to_string(s.n_v_heads) +
                 " must be >= 1");
    if (s.n_v_heads % s.n_k_heads != 0)
      return bad("n_v_heads = " + std::to_string(s.n_v_heads) +
                 " is not a multiple of n_k_heads = " + std::to_string(s.n_k_heads));
    if (s.k_head_dim < 1 || s.v_head_dim < 1 || s.k_head_dim % 4 != 0 || s.v_head_dim % 4 != 0)
      return bad("head dims " + std::to_string(s.k_head_dim) + ", " + std::to_string(s.v_head_dim) +
                 " must be positive multiples of 4");
    if (s.conv_kernel < 1) return bad("conv_kernel = " + std::to_string(s.conv_kernel) + " must be >= 1");
    Q35_TRY(buf_.allocate(s.bytes() / sizeof(float)));
    shape_ = s;
    Q35_TRY(fill_bytes(buf_.data(), 0, buf_.bytes()));
    return synchronize();
  }

  const gdn_state_shape& shape() const { return shape_; }
  // Bytes of one slot's state over all layers (what snapshot() writes).
  size_t slot_bytes() const { return size_t(shape_.n_layers) * size_t(shape_.layer_slot_floats()) * sizeof(float); }
  size_t bytes() const { return buf_.bytes(); }

  // Device view of GDN layer `gdn_layer_index` (0-based among the GDN layers), all slots.
  gdn_state_view layer(int gdn_layer_index) {
    gdn_state_view v;
    if (gdn_layer_index < 0 || gdn_layer_index >= shape_.n_layers) return v;  // empty: validate() names it
    v.data = buf_.data() + int64_t(gdn_layer_index) * shape_.layer_slot_floats();
    v.slot_stride = int64_t(shape_.n_layers) * shape_.layer_slot_floats();
    v.shape = shape_;
    return v;
  }

  // Zeroes every layer's state of `slot` (a new sequence). Asynchronous on cuda.
  status reset(int slot, stream_t stream = nullptr) {
    Q35_TRY(check_slot("reset", "slot", slot));
    return fill_bytes(slot_ptr(slot), 0, slot_bytes(), stream);
  }
  // Copies the state of src_slot to dst_slot (fork a sequence). Asynchronous on cuda.
  status copy(int src_slot, int dst_slot, stream_t stream = nullptr) {
    Q35_TRY(check_slot("copy", "src_slot", src_slot));
    Q35_TRY(check_slot("copy", "dst_slot", dst_slot));
    if (src_slot == dst_slot) return status::success();
    return q35::copy(slot_ptr(dst_slot), slot_ptr(src_slot), slot_bytes(), copy_kind::device_to_device, stream);
  }
  // Copies the slot's state (all layers, slot_bytes()) to host memory; synchronizes the stream.
  status snapshot(int slot, std::vector<uint8_t>& host, stream_t stream = nullptr) const {
    Q35_TRY(check_slot("snapshot", "slot", slot));
    host.resize(slot_bytes());
    Q35_TRY(q35::copy(host.data(), slot_ptr(slot), slot_bytes(), copy_kind::device_to_host, stream));
    return synchronize(stream);
  }
  // Replaces the slot's state by a snapshot; the size must be slot_bytes(). Synchronizes the stream
  // (the host vector may be freed on return).
  status restore(int slot, const std::vector<uint8_t>& host, stream_t stream = nullptr) {
    Q35_TRY(check_slot("restore", "slot", slot));
    if (host.size() != slot_bytes())
      return error(status_code::invalid_argument, "recurrent_state_pool::restore: snapshot holds " +
                                                      std::to_string(host.size()) + " bytes, a slot holds " +
                                                      std::to_string(slot_bytes()));
    Q35_TRY(q35::copy(slot_ptr(slot), host.data(), slot_bytes(), copy_kind::host_to_device, stream));
    return synchronize(stream);
  }

 private:
  status check_slot(const char* op, const char* name, int slot) const {
    if (buf_.data() == nullptr)
      return error(status_code::invalid_argument, std::string("recurrent_state_pool::") + op + ": not allocated");
    if (slot < 0 || slot >= shape_.n_slots)
      return error(status_code::invalid_argument, std::string("recurrent_state_pool::") + op + ": " + name + " = " +
                                                      std::to_string(slot) + " is outside 0.." +
                                                      std::to_string(shape_.n_slots - 1));
    return status::success();
  }
  float* slot_ptr(int slot) const {
    return const_cast<float*>(buf_.data()) + int64_t(slot) * shape_.n_layers * shape_.layer_slot_floats();
  }

  device_buffer<float> buf_;
  gdn_state_shape shape_{};
};

}  // namespace q35::kv
