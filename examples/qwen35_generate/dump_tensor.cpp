// --dump-tensor NAME --out PATH: the tensor dequantized to little-endian float32 through the
// library's dequant kernel (launch::dequant on the active backend), for comparison with any other
// implementation. A tensor of a type q35 cannot read fails with an error naming tensor and type.
#include <bit>
#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "q35/arch/memory.hpp"
#include "q35/io/gguf.hpp"
#include "q35/launch/dequant.hpp"
#include "q35/quant/format_list.hpp"

namespace q35::cli {

namespace {

void check(const status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.to_string());
}

}  // namespace

int run_dump_tensor(const options& opt, std::ostream& out) {
  static_assert(std::endian::native == std::endian::little, "--dump-tensor writes the host's floats as little-endian");
  const auto file = io::gguf_file::open(opt.model_path);
  const io::tensor_info* t = file.find_tensor(opt.tensor_name);
  if (!t) throw std::runtime_error("no tensor named '" + opt.tensor_name + "' in " + opt.model_path);
  if (!quant::is_supported(t->type))
    throw std::runtime_error("tensor '" + t->name + "' has type " + std::string(t->type_name()) +
                             ", which q35 cannot dequantize (" + std::string(quant::supported_format_names) + ")");
  const int64_t n = int64_t(t->n_elements());
  // the file's bytes -> device, dequantize there, float32 back
  device_buffer<uint8_t> src;
  device_buffer<float> dst;
  check(src.allocate(size_t(t->n_bytes)), "allocating the tensor");
  check(dst.allocate(size_t(n)), "allocating the output");
  check(src.upload(t->data, size_t(t->n_bytes)), "uploading the tensor");
  check(launch::dequant(t->type, src.data(), n, dst.data()), "dequantizing '" + t->name + "'");
  std::vector<float> host(static_cast<size_t>(n));
  check(dst.download(host.data(), host.size()), "downloading the result");
  check(synchronize(), "dequantizing '" + t->name + "'");
  std::ofstream f(opt.out_path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(host.data()), std::streamsize(host.size() * sizeof(float)));
  if (!f) throw std::runtime_error("cannot write '" + opt.out_path + "'");
  out << t->name << ": " << t->type_name() << " [";
  for (uint32_t d = 0; d < t->n_dims; ++d) out << (d ? ", " : "") << t->ne[d];
  out << "] -> " << n << " float32 values in " << opt.out_path << " (" << Q35_BACKEND_NAME << ")\n";
  return 0;
}

}  // namespace q35::cli
