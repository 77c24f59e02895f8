// Host API of the dequantization kernel: validate, then run on the active backend.
//   launch::dequant<quant::q4_k_format>(blocks, n, out, stream)   typed
//   launch::dequant(ggml_type_id, bytes, n, out, stream)          from a GGUF tensor's type id
#pragma once

#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/kernels/dequant.hpp"
#include "q35/launch/launch.hpp"
#include "q35/quant/format_list.hpp"

namespace q35::launch {

template <quant::weight_format Format, class Out>
status validate(const typename kernels::dequant_kernel<Format, Out>::params& p) {
  const std::string what = std::string("dequant ") + Format::name + ": ";
  if (p.n_elems < 0) return error(status_code::invalid_argument, what + "negative element count");
  if (p.n_elems % Format::block_elems != 0)
    return error(status_code::invalid_argument, what + std::to_string(p.n_elems) +
                                                    " elements is not a multiple of the block size " +
                                                    std::to_string(Format::block_elems));
  if (p.n_elems > 0 && (!p.src || !p.dst)) return error(status_code::invalid_argument, what + "null pointer");
  return status::success();
}

// dst[i] = element i of the tensor `src` (n_elems elements, GGUF block layout of Format).
template <quant::weight_format Format, class Out>
status dequant(const typename Format::block* src, int64_t n_elems, Out* dst, stream_t stream = nullptr) {
  using kernel = kernels::dequant_kernel<Format, Out>;
  const typename kernel::params p{src, dst, n_elems};
  Q35_TRY((validate<Format, Out>(p)));
  return launch<kernel>(p, stream);
}

// As above for a tensor given as raw device bytes and its ggml type id; an unsupported type is an
// `unsupported` status naming it, a misaligned pointer is rejected.
template <class Out>
status dequant(uint32_t ggml_type, const void* src_bytes, int64_t n_elems, Out* dst, stream_t stream = nullptr) {
  return quant::with_format(ggml_type, [&](auto tag) -> status {
    using format = typename decltype(tag)::type;
    if (reinterpret_cast<uintptr_t>(src_bytes) % alignof(typename format::block) != 0)
      return error(status_code::invalid_argument,
                   std::string("dequant ") + format::name + ": source is not aligned to its block struct");
    return dequant<format, Out>(static_cast<const typename format::block*>(src_bytes), n_elems, dst, stream);
  });
}

}  // namespace q35::launch
