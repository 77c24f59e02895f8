// libFuzzer target for the GGUF reader and the qwen35 binding: any input must either parse or throw
// q35::io::gguf_error; every other exception, crash, leak, hang or sanitizer report is a finding.
// Parsed files go through every typed accessor, every tensor of a supported type through the
// dequant kernel on the sim backend, then hyper-parameter reading, the tensor catalogue, weight
// binding, traits matching and the --info description.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "q35/io/gguf.hpp"
#include "q35/io/model_info.hpp"
#include "q35/io/model_weights.hpp"
#include "q35/launch/dequant.hpp"
#include "q35/quant/format_list.hpp"
#include "q35/sim/address_space.hpp"
#include "reference/quant_reference.hpp"

namespace {

// Registers [p, p + bytes) as device memory with the sim while it lives.
struct exact_device_memory {
  const void* p;
  exact_device_memory(const void* p_, size_t bytes) : p(p_) {
    q35::sim::register_allocation(p, bytes, q35::sim::memory_space::device);
  }
  ~exact_device_memory() { q35::sim::unregister_allocation(p); }
  exact_device_memory(const exact_device_memory&) = delete;
  exact_device_memory& operator=(const exact_device_memory&) = delete;
};

// Dequantizes every tensor of a supported type through launch::dequant (the sim runs the kernel
// on the host) from an exact-size copy of the bytes the reader validated into an exact-size
// output, so ASan reports any kernel read past those bytes or write past the n elements. The
// format's own row size must equal the reader's byte count, and the values must equal the
// independent host reference bit for bit (NaN matching any NaN). Any failure traps: a finding.
void dequantize_all(const q35::io::gguf_file& f) {
  for (const q35::io::tensor_info& t : f.tensors()) {
    if (!q35::quant::is_supported(t.type) || t.n_bytes == 0) continue;
    const int64_t n = int64_t(t.n_elements());
    const q35::status sized = q35::quant::with_format(t.type, [&](auto tag) -> q35::status {
      using format = typename decltype(tag)::type;
      const uint64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
      if (uint64_t(format::row_bytes(int64_t(t.ne[0]))) * rows != t.n_bytes)
        return q35::error(q35::status_code::invalid_argument, "row bytes differ from the reader's");
      return q35::status::success();
    });
    if (!sized.ok()) __builtin_trap();
    std::unique_ptr<uint8_t[]> src(new uint8_t[size_t(t.n_bytes)]);
    std::memcpy(src.get(), t.data, size_t(t.n_bytes));
    std::unique_ptr<float[]> dst(new float[size_t(n)]);
    // device memory of exactly these sizes (device_alloc rounds up to 256 bytes, where ASan would not
    // see an overrun): registered as such, since a launch refuses host memory (sim/address_space.hpp)
    const exact_device_memory in(src.get(), size_t(t.n_bytes)), out(dst.get(), size_t(n) * sizeof(float));
    if (!q35::launch::dequant(t.type, src.get(), n, dst.get()).ok()) __builtin_trap();
    const std::vector<float> want = q35::ref::dequantize(t.type, src.get(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float a = dst[size_t(i)], b = want[size_t(i)];
      const bool same = (a != a || b != b) ? (a != a && b != b) : std::memcmp(&a, &b, 4) == 0;
      if (!same) __builtin_trap();
    }
  }
}

// Reads every metadata value through the accessor its type calls for; returns a checksum so the
// reads are not optimised away.
uint64_t read_all_metadata(const q35::io::gguf_file& f) {
  using q35::io::gguf_type;
  uint64_t sum = 0;
  for (const q35::io::gguf_kv& kv : f.metadata()) {
    try {
      switch (kv.type) {
        case gguf_type::string:
          sum += f.get_string(kv.key).size();
          break;
        case gguf_type::float32:
        case gguf_type::float64:
          sum += uint64_t(f.get_float(kv.key) != 0);
          break;
        case gguf_type::bool_:
          sum += f.get_bool(kv.key);
          break;
        case gguf_type::array:
          sum += f.array_size(kv.key);
          if (kv.elem_type == gguf_type::string) {
            for (std::string_view s : f.get_string_array(kv.key)) sum += s.size();
          } else if (kv.elem_type == gguf_type::float32 || kv.elem_type == gguf_type::float64) {
            sum += f.get_float_array(kv.key).size();
          } else if (kv.elem_type != gguf_type::array && kv.elem_type != gguf_type::bool_) {
            for (int64_t v : f.get_int_array(kv.key)) sum += uint64_t(v);
          }
          break;
        default:
          sum += uint64_t(f.get_int(kv.key));  // may throw for uint64 > INT64_MAX
          sum += f.get_uint(kv.key);           // may throw for negative values
      }
    } catch (const q35::io::gguf_error&) {
    }
  }
  for (const q35::io::tensor_info& t : f.tensors()) {
    sum += t.n_bytes + t.n_elements();
    if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];  // first and last byte must be mapped
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile uint64_t sink = 0;
  try {
    const auto f =
        q35::io::gguf_file::from_memory(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
    sink = sink + read_all_metadata(f);
    dequantize_all(f);
    const q35::io::model_hparams h = q35::io::read_hparams(f);
    q35::io::check_tensors(f, h);
    const q35::io::model_weights w = q35::io::bind_weights(f, h);
    sink = sink + w.layers.size() + w.output->n_bytes;
    try {
      sink = sink + q35::io::state_bytes(h, 4096).total();
    } catch (const std::overflow_error&) {  // documented: absurd but in-range dimensions
    }
    sink = sink + q35::io::match_known_model(f, h).size();  // throws for unknown shapes
    sink = sink + q35::io::format_model_info(q35::io::describe_model(f, 4096)).size();
  } catch (const q35::io::gguf_error&) {
    // the expected outcome for malformed or unsupported input
  }
  return 0;
}
