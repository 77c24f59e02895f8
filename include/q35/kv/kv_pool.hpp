// kv::kv_pool: one device allocation holding the K and V of every full-attention layer for every
// sequence, in pages of page_tokens tokens; kv_layer_view is what a kernel sees of one layer.
//
// Layout (per layer l, K then V; a page index names the same token slots in every layer):
//   K_l: [n_pages][n_kv_heads][page_tokens][head_dim]   V_l: [n_pages][n_kv_heads][page_tokens][value_dim]
// so one head's rows of one page are contiguous (page_tokens * head_dim elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/status.hpp"

namespace q35::kv {

enum class kv_type { f32, f16, bf16 };

inline constexpr size_t kv_type_bytes(kv_type t) { return t == kv_type::f32 ? 4 : 2; }
inline const char* to_string(kv_type t) { return t == kv_type::f32 ? "f32" : t == kv_type::f16 ? "f16" : "bf16"; }

// The element type behind a kv_type.
template <kv_type T>
struct kv_element;
template <>
struct kv_element<kv_type::f32> {
  using type = float;
};
template <>
struct kv_element<kv_type::f16> {
  using type = half;
};
template <>
struct kv_element<kv_type::bf16> {
  using type = bf16;
};

// Tokens per page chosen by default: 16. Small enough that a sequence wastes under 16 slots and a
// fork copies at most one 16-token page; large enough that the page lookup (one int per 4-key group of
// a key stream) and the page table (32k tokens -> 2048 entries) cost nothing next to the 8 KB of one
// 9B head's K in a page (16 x 256 x 2 B).
inline constexpr int default_page_tokens = 16;

struct kv_pool_shape {
  int n_layers = 0;                       // full-attention layers
  int n_kv_heads = 0;                     // KV heads per layer
  int head_dim = 0;                       // K width per head
  int value_dim = 0;                      // V width per head
  int page_tokens = default_page_tokens;  // a power of two, 4..1024
  int64_t n_pages = 0;
  kv_type type = kv_type::f16;
};

// One layer's K and V pages, type-erased (kernels reach the element type through kv_type).
struct kv_layer_view {
  void* k = nullptr;  // [n_pages][n_kv_heads][page_tokens][head_dim] of `type`
  void* v = nullptr;  // [n_pages][n_kv_heads][page_tokens][value_dim] of `type`
  kv_type type = kv_type::f16;
  int n_kv_heads = 0, head_dim = 0, value_dim = 0, page_tokens = 0;
  int64_t n_pages = 0;

  bool empty() const { return k == nullptr; }
};

// Elements of one page of one layer's K (or V with value_dim).
inline int64_t page_elems(const kv_pool_shape& s, int dim) { return int64_t(s.n_kv_heads) * s.page_tokens * dim; }

// A pending device copy of every layer's K and V of page `src` into page `dst` (what fork asks for).
struct page_copy {
  int32_t src = 0, dst = 0;
};

inline status check_shape(const kv_pool_shape& s) {
  const auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "kv_pool: " + m); };
  if (s.n_layers < 1) return bad("n_layers = " + std::to_string(s.n_layers) + " must be >= 1");
  if (s.n_kv_heads < 1) return bad("n_kv_heads = " + std::to_string(s.n_kv_heads) + " must be >= 1");
  if (s.head_dim < 1 || s.value_dim < 1) return bad("head_dim and value_dim must be >= 1");
  if ((int64_t(s.head_dim) * int64_t(kv_type_bytes(s.type))) % 16 != 0 ||
      (int64_t(s.value_dim) * int64_t(kv_type_bytes(s.type))) % 16 != 0)
    return bad("head_dim and value_dim rows must be a multiple of 16 bytes");
  if (s.page_tokens < 4 || s.page_tokens > 1024 || (s.page_tokens & (s.page_tokens - 1)) != 0)
    return bad("page_tokens = " + std::to_string(s.page_tokens) + " is not a power of two in 4..1024");
  if (s.n_pages < 1 || s.n_pages > INT32_MAX)
    return bad("n_pages = " + std::to_string(s.n_pages) + " is outside 1..2^31-1");
  return status::success();
}

// Bytes of the one allocation a kv_pool of shape `s` holds: every layer's K and V pages.
inline size_t kv_pool_bytes(const kv_pool_shape& s) {
  const size_t eb = kv_type_bytes(s.type);
  return size_t(s.n_layers) * size_t(s.n_pages) * size_t(page_elems(s, s.head_dim) + page_elems(s, s.value_dim)) * eb;
}

class kv_pool {
 public:
  // One device allocation of n_layers * n_pages * page_tokens * n_kv_heads * (head_dim + value_dim)
  // elements. Contents are uninitialised (pages are written by the append kernel before being read).
  status allocate(const kv_pool_shape& s) {
    Q35_TRY(check_shape(s));
    const size_t eb = kv_type_bytes(s.type);
    k_bytes_ = size_t(s.n_pages) * size_t(page_elems(s, s.head_dim)) * eb;
    v_bytes_ = size_t(s.n_pages) * size_t(page_elems(s, s.value_dim)) * eb;
    Q35_TRY(mem_.allocate(kv_pool_bytes(s)));
    shape_ = s;
    return status::success();
  }

  const kv_pool_shape& shape() const { return shape_; }
  size_t bytes() const { return mem_.bytes(); }
  bool allocated() const { return mem_.data() != nullptr; }

  // The K/V view of full-attention layer `attn_layer_index` (0-based among attention layers);
  // an empty view for an index outside 0..n_layers-1.
  kv_layer_view layer(int attn_layer_index) {
    kv_layer_view v;
    if (attn_layer_index < 0 || attn_layer_index >= shape_.n_layers || !allocated()) return v;
    unsigned char* base = mem_.data() + size_t(attn_layer_index) * (k_bytes_ + v_bytes_);
    v.k = base;
    v.v = base + k_bytes_;
    v.type = shape_.type;
    v.n_kv_heads = shape_.n_kv_heads, v.head_dim = shape_.head_dim, v.value_dim = shape_.value_dim;
    v.page_tokens = shape_.page_tokens, v.n_pages = shape_.n_pages;
    return v;
  }

  // Copies page src to page dst in every layer, K and V (device to device, ordered on `stream`).
  status copy_pages(const std::vector<page_copy>& copies, stream_t stream = nullptr) {
    const size_t eb = kv_type_bytes(shape_.type);
    const size_t kp = size_t(page_elems(shape_, shape_.head_dim)) * eb;
    const size_t vp = size_t(page_elems(shape_, shape_.value_dim)) * eb;
    for (const page_copy& c : copies) {
      if (c.src < 0 || c.src >= shape_.n_pages || c.dst < 0 || c.dst >= shape_.n_pages)
        return error(status_code::invalid_argument, "kv_pool::copy_pages: page outside the pool");
      for (int l = 0; l < shape_.n_layers; ++l) {
        unsigned char* base = mem_.data() + size_t(l) * (k_bytes_ + v_bytes_);
        Q35_TRY(copy(base + size_t(c.dst) * kp, base + size_t(c.src) * kp, kp, copy_kind::device_to_device, stream));
        unsigned char* vb = base + k_bytes_;
        Q35_TRY(copy(vb + size_t(c.dst) * vp, vb + size_t(c.src) * vp, vp, copy_kind::device_to_device, stream));
      }
    }
    return status::success();
  }

 private:
  kv_pool_shape shape_;
  device_buffer<unsigned char> mem_;
  size_t k_bytes_ = 0, v_bytes_ = 0;  // one layer's K (V) region
};

}  // namespace q35::kv
