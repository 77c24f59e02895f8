// libFuzzer target for the GGUF reader and the qwen35 binding: any input must either parse or throw
// q35::io::gguf_error; every other exception, crash, leak, hang or sanitizer report is a finding.
// Parsed files go through every typed accessor, hyper-parameter reading, the tensor catalogue,
// weight binding, traits matching and the --info description.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "q35/io/gguf.hpp"
#include "q35/io/model_info.hpp"
#include "q35/io/model_weights.hpp"

namespace {

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
